"""Adapters for JAX: what differs between the supported releases, and JAX's private APIs.

pytest-jaxport supports jax 0.6.2 to 0.12 (``docs/compatibility.md``). Where the plugin needs
an API that changed between those releases, or one only JAX's private modules (``jax._src``)
offer, it goes through a function here that says which releases do what, so a new JAX
release is supported by changing this module and ``docs/compatibility.md``. (Older private
uses not yet moved here: ``deviceless``'s backend checks, ``jaxprs``' interpreter.)

JAX is imported inside functions only (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_jaxport.model.devices import DEFAULT_DEVICES
from pytest_jaxport.model.interpreters import (
    GENERIC_INTERPRET,
    GPU_INTERPRET,
    TPU_INTERPRET,
    Interpreter,
    KernelKind,
    interpreter_for,
)
from pytest_jaxport.model.libtpu import COMPILE_TARGETS
from pytest_jaxport.model.platforms import JAX_DEVICE_KINDS, JAX_GPU

if TYPE_CHECKING:
    from jax._src.source_info_util import Frame, SourceInfo
    from jax.extend.core import JaxprEqn

GPU_PLATFORMS: tuple[str, ...] = JAX_GPU
"""The platforms JAX's ``gpu`` means (cuda, rocm, oneapi), from their descriptions."""

DESCRIBED_GPUS: Mapping[str, str] = JAX_DEVICE_KINDS
"""The GPU a trace describes, per platform, where a lowering rule asks which GPU it lowers
for and none is present (each description's ``jax_device_kind``): an H100 for cuda, an
MI300 (``gfx942``) for rocm, a Data Center GPU Max 1550 for oneapi. JAX accepts only device
kinds it knows (its Pallas ``GpuVersion`` names, or a ``gfx`` architecture)."""


def jax_release() -> str:
    """The installed jax's version string, as reports show it (``0.12.0.1``)."""
    from importlib.metadata import version

    return version("jax")


# -- tracing for a GPU that is not here ------------------------------------------------------


DESCRIBED_TPU = COMPILE_TARGETS["tpu"][DEFAULT_DEVICES["tpu"].generation].device_kind
"""The TPU a trace describes where a Pallas TPU lowering rule asks which TPU it lowers for
and no device or other kind is configured: the default device's (``TPU v5 lite``)."""


def device_description(
    platform: str, device_kind: str | None = None
) -> contextlib.AbstractContextManager[object] | None:
    """A context manager in which JAX traces for one abstract ``platform`` device of
    ``device_kind`` (a GPU: :func:`gpu_description`; a TPU: :data:`DESCRIBED_TPU` by
    default), or ``None`` where this JAX has no way to say it.

    Some Pallas TPU lowering rules (integer division, some reshapes) read the default
    device's kind (``tpu_info.get_tpu_info()``) and, on a machine without a TPU, raise
    "Unsupported TPU device kind: cpu"; inside an ``AbstractMesh`` whose abstract device is
    a TPU of a known kind they read that one (jax 0.10 and later; research §5).
    """
    if platform != "tpu":
        return gpu_description(platform, device_kind)
    return _abstract_device(platform, device_kind or DESCRIBED_TPU, num_cores=1)


def _abstract_device(
    platform: str, device_kind: str, *, num_cores: int | None
) -> contextlib.AbstractContextManager[object] | None:
    import inspect

    import jax.sharding

    abstract_device = getattr(jax.sharding, "AbstractDevice", None)
    use_abstract_mesh = getattr(jax.sharding, "use_abstract_mesh", None)
    if abstract_device is None or use_abstract_mesh is None:
        return None
    if "platform" not in inspect.signature(abstract_device).parameters:
        return None
    device = abstract_device(device_kind=device_kind, num_cores=num_cores, platform=platform)
    abstract_mesh: Any = jax.sharding.AbstractMesh  # typed without abstract_device before 0.7
    mesh = abstract_mesh((1,), ("jaxport",), abstract_device=device)
    described: contextlib.AbstractContextManager[object] = use_abstract_mesh(mesh)
    return described


def gpu_description(
    platform: str, device_kind: str | None = None
) -> contextlib.AbstractContextManager[object] | None:
    """A context manager in which JAX traces for one abstract ``platform`` GPU of
    ``device_kind`` (default :data:`DESCRIBED_GPUS`), or ``None`` where this JAX has no way
    to say it, or needs none.

    From jax 0.11 the Pallas GPU lowering rules ask which GPU they lower for and, with none
    present, raise "No supported GPU devices found, please specify an abstract GPU device
    using AbstractDevice". The answer is a trace (lowering alone is not enough) inside
    ``jax.sharding.use_abstract_mesh`` with an ``AbstractMesh`` whose ``abstract_device``
    is an ``AbstractDevice(device_kind=..., platform=...)``. That argument exists from jax
    0.10; 0.7 to 0.9 have ``AbstractDevice`` without it (and do not ask), 0.6 has none.
    A trace made so lowers for its GPU platform only: it cannot be compiled for cpu.
    """
    if platform not in GPU_PLATFORMS:
        return None
    return _abstract_device(platform, device_kind or DESCRIBED_GPUS[platform], num_cores=None)


# -- failures that say the hardware is missing, not that the code is not portable ---------------

_NEEDS_GPU = (
    # Pallas GPU lowering (jax >= 0.11) asking for a GPU it cannot find or was not described.
    "No supported GPU devices found",
    # cuDNN fused attention (every supported release) asks for cuDNN's version: without the
    # CUDA plugin, and with it but without cuDNN's libraries.
    "cuDNN is not detected",
    "cuDNN not found",
    # jaxlib's GPU linear algebra (eig) asks cuSOLVER for its version while lowering.
    "cusolverGetVersion",
)


_NEEDS_TPU = (
    # Pallas TPU lowering rules reading the default device's kind (jax 0.10 to 0.12).
    "Unsupported TPU device kind",
)


def needs_hardware(error: str) -> str | None:
    """``"GPU"`` (or ``"TPU"``) when a failure to lower is JAX asking for a GPU (a TPU) that
    is not here (the code may well lower on a machine with one), else ``None``: a failure of
    the code itself.

    ``error`` is the failure as :func:`pytest_jaxport._jax.lowering.describe_error` words it.
    The list is JAX's own messages for lowering rules that query the device, per release
    (``docs/compatibility.md``); a message not listed is a finding about the code.
    """
    if any(fragment in error for fragment in _NEEDS_GPU):
        return "GPU"
    if any(fragment in error for fragment in _NEEDS_TPU):
        return "TPU"
    return None


def missing_package(error: str) -> str | None:
    """What to install when a failure comes from a package JAX imports without declaring
    it and that is missing here, else ``None``.

    Pallas's Mosaic GPU backend (the default for ``pallas_call`` on GPU in jax 0.9 and 0.10,
    and ``plgpu.kernel`` up to 0.11) and jax 0.9's Pallas TPU backend import ``absl``; without
    it JAX says only "Cannot lower pallas_call on platform: gpu. To use Pallas on GPU,
    install jaxlib GPU", which is not the cause. pytest-jaxport depends on absl-py, so this
    is an install made without dependencies (``--no-deps``) or a package removed since.
    """
    import importlib.util

    asks = "Cannot lower pallas_call on platform" in error or "No module named 'absl'" in error
    if asks and importlib.util.find_spec("absl") is None:
        return (
            "Pallas needs absl-py with this jax, a dependency of pytest-jaxport: "
            "pip install absl-py"
        )
    return None


# -- lowering several platforms together ------------------------------------------------------

FALLING_BACK_RULES = ("_threefry2x32_gpu_lowering_rule",)
"""Platform lowering rules that run JAX's default rule of their primitive unless a JAX option
turns their own lowering on: threefry2x32's on cuda and rocm calls the default (the unrolled
hash) while ``jax_threefry_gpu_kernel_lowering`` is off, its default (jax 0.6 to 0.12)."""


@contextlib.contextmanager
def default_rules_shared(platforms: Sequence[str]) -> Iterator[None]:
    """While ``platforms`` are lowered together: the platform rules that would run the
    default rule anyway (:data:`FALLING_BACK_RULES`, their option off) set aside, so that
    JAX emits the default rule once for every platform without a rule of its own, where it
    emits each platform's rule apart (an eager ``jax.random.normal`` lowered for cuda, rocm
    and tpu holds the unrolled hash once instead of three times: each platform's program is
    the same). Restored after, unless something registered another rule meanwhile; nothing
    is set aside where the option is on or a rule is not the one known."""
    set_aside = _falling_back(tuple(platforms)) if len(platforms) > 1 else ()
    if set_aside:
        from jax._src.interpreters import mlir

        registry = mlir._platform_specific_lowerings
        set_aside = tuple(
            (platform, primitive, entry)
            for platform, primitive, entry in set_aside
            if registry[platform].get(primitive) is entry
        )
        for platform, primitive, _ in set_aside:
            del registry[platform][primitive]
    try:
        yield
    finally:
        for platform, primitive, entry in set_aside:
            registry[platform].setdefault(primitive, entry)


def _falling_back(platforms: tuple[str, ...]) -> tuple[tuple[str, Any, Any], ...]:
    """``(platform, primitive, registry entry)`` of each rule of :data:`FALLING_BACK_RULES`
    that ``platforms`` have and that now runs its primitive's default rule."""
    try:
        from jax._src import config

        if config.threefry_gpu_kernel_lowering.value:
            return ()
    except (ImportError, AttributeError):  # a JAX without the option: nothing is known
        return ()
    return tuple(found for platform in platforms for found in _known_rules(platform))


@functools.cache
def _known_rules(platform: str) -> tuple[tuple[str, Any, Any], ...]:
    """``platform``'s registry entries of :data:`FALLING_BACK_RULES` (a partial of one of
    those functions) whose primitive has a default rule, found once."""
    from jax._src.interpreters import mlir

    found = []
    for primitive, entry in mlir._platform_specific_lowerings.get(platform, {}).items():
        rule = getattr(entry, "rule", None)
        name = getattr(getattr(rule, "func", None), "__name__", None)
        known = isinstance(rule, functools.partial) and name in FALLING_BACK_RULES
        if known and primitive in mlir._lowerings:
            found.append((platform, primitive, entry))
    return tuple(found)


# -- the profiler -----------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_type_construction() -> Iterator[None]:
    """Read profiler data without JAX's nanobind types warning as they are built.

    ``jax.profiler.ProfileData`` builds some of its Python types lazily (``event_stats``, on
    the first ``event.stats``); on Python 3.12+ building a type without a ``__module__``
    warns (DeprecationWarning), and where warnings are errors (``-W error``,
    ``filterwarnings = ["error"]``) nanobind aborts the process. The warning is JAX's
    implementation detail, never the user's: it is ignored here, and only here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"builtin type \S+ has no __module__ attribute",
            category=DeprecationWarning,
        )
        yield


def profiler_session(host_tracer_level: int = 1) -> Any:
    """A started in-memory profiler session (``jax._src.lib._profiler.ProfilerSession``):
    ``session.stop()`` returns the serialized XSpace without writing files.

    Raises ``RuntimeError`` where this jaxlib has no profiler extension.
    """
    import jax

    try:
        from jax._src.lib import _profiler
    except ImportError as e:  # pragma: no cover - jaxlib without the profiler extension
        raise RuntimeError(f"the JAX profiler is not available: {e}") from e
    options = jax.profiler.ProfileOptions()
    options.host_tracer_level = host_tracer_level
    options.python_tracer_level = 0
    return _profiler.ProfilerSession(options)


PROFILER_NAMES_INSTRUCTIONS_FROM = (0, 8, 3)
"""The first jaxlib whose CPU and GPU profilers name the instruction each event executed
(its ``hlo_op`` stat); older ones record the run without saying what ran."""


def profiler_names_instructions() -> bool:
    """Whether this jaxlib's profilers name instructions
    (:data:`PROFILER_NAMES_INSTRUCTIONS_FROM`)."""
    from importlib.metadata import version

    parts = []
    for part in version("jaxlib").split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts) >= PROFILER_NAMES_INSTRUCTIONS_FROM


def profile_data(xspace: bytes) -> Any:
    """``jax.profiler.ProfileData`` of a serialized XSpace (jaxlib 0.7.1+; ``None`` before).

    Raises ``RuntimeError`` where this jax has no ``ProfileData``.
    """
    import jax

    data = getattr(jax.profiler, "ProfileData", None)
    if data is None:
        raise RuntimeError("measuring runtime share needs jax.profiler.ProfileData (jaxlib>=0.8.3)")
    with quiet_type_construction():
        return data.from_serialized_xspace(xspace)


# -- jaxprs -----------------------------------------------------------------------------------


def user_frames(source_info: SourceInfo) -> Iterator[Frame]:
    """The user frames of an equation's ``source_info`` (JAX's filter of its own frames):
    jax 0.7+ takes the traceback, 0.6 the ``SourceInfo``."""
    from jax._src import source_info_util

    try:
        return source_info_util.user_frames(source_info.traceback)
    except AttributeError:
        return source_info_util.user_frames(source_info)


def bind_params(eqn: JaxprEqn) -> tuple[tuple[object, ...], dict[str, object]]:
    """``(subfuns, params)`` to re-bind ``eqn``'s primitive with: jax 0.6 returns both from
    ``get_bind_params``, later releases the params alone."""
    get_bind_params: Callable[
        [dict[str, object]],
        tuple[Sequence[object], Mapping[str, object]] | Mapping[str, object],
    ] = eqn.primitive.get_bind_params  # untyped in JAX
    bound = get_bind_params(eqn.params)
    if isinstance(bound, tuple):
        subfuns, params = bound
        return tuple(subfuns), dict(params)
    return (), dict(bound)


KERNEL_PRIMITIVES = frozenset(
    {
        "ffi_call",
        "custom_call",
        "triton_kernel_call",
        "tpu_custom_call",
        "pallas_call",  # pl.pallas_call (Triton, Mosaic TPU, Mosaic GPU up to jax 0.10)
        "core_map",  # plgpu.kernel / pl.kernel, jax 0.6 to 0.9
        "mpmd_map",  # plgpu.kernel / pl.kernel, jax 0.10+
    }
)
"""Primitives that carry a hand-written kernel, by the names the supported releases use."""


def kernel_equation_name(primitive: str, params: Mapping[str, object]) -> str:
    """A kernel primitive's name for messages (``Pallas kernel matmul``, ``FFI target x``)."""
    if primitive == "ffi_call":
        return f"FFI target {params.get('target_name', '?')}"
    if primitive in ("pallas_call", "core_map", "mpmd_map"):
        name = params.get("name")
        if not isinstance(name, str) or not name:
            info = getattr(params.get("jaxpr"), "debug_info", None)
            source = getattr(info, "func_src_info", None) or ""
            name = source.split(" at ")[0] or "?"
        return f"Pallas kernel {name}"
    return primitive


# -- emulation: what each release offers to replay a program as another platform -------------


def scan_operands(
    params: Mapping[str, Any], values: list[object]
) -> tuple[list[object], list[object], list[object]]:
    """A scan's operands as ``(consts, carry, xs)``: split by ``num_consts``/``num_carry``
    up to jax 0.11, by the ``ft_in`` flat tree (its three groups) from 0.12."""
    if "num_consts" in params:
        consts, carry = int(params["num_consts"]), int(params["num_carry"])
        return values[:consts], values[consts : consts + carry], values[consts + carry :]
    consts_, carry_, xs_ = params["ft_in"].update(list(values)).unpack()
    return list(consts_), list(carry_), list(xs_)


CALL_PRIMITIVES = frozenset({"pjit", "jit", "closed_call", "core_call"})
"""Nested calls (``jax.jit`` inside the traced function), by the names releases use."""

INLINED_PRIMITIVES = CALL_PRIMITIVES | frozenset(
    {
        # custom derivative rules: the program runs their primal (AD already happened at trace)
        "custom_jvp_call",
        "custom_vjp_call",
        "custom_vjp_call_jaxpr",  # jax < 0.7
        # rematerialization and custom batching do not change what the forward pass computes
        "checkpoint",
        "remat2",  # jax 0.6's name for checkpoint
        "custom_vmap_call",  # plgpu.kernel wraps its kernel in one
    }
)
"""Primitives that run their body once on their operands, by the names the supported
releases use: an emulation replays their body in place."""


_PARAM_KINDS: tuple[tuple[str, KernelKind], ...] = (
    # module of a compiler-params class (or a jax 0.6 compiler_params dict key) -> kind
    ("mosaic_gpu", "mosaic_gpu"),
    ("triton", "triton"),
    ("mosaic", "mosaic_tpu"),
)


def _kind_named(text: str) -> KernelKind | None:
    for fragment, kind in _PARAM_KINDS:
        if fragment in text:
            return kind
    return None


def kernel_kind(primitive: str, params: Mapping[str, Any], platform: str) -> KernelKind | None:
    """The kernel kind ``platform``'s lowering selects for a kernel equation (``None`` for
    an FFI target or an unknown kind).

    ``pallas_call`` picks by its compiler parameters (a ``CompilerParams`` class per
    backend; jax 0.6: a dict keyed by backend) and without them by platform: Mosaic TPU on
    tpu, Triton on rocm, on cuda Mosaic GPU where ``jax_pallas_use_mosaic_gpu`` is on (its
    default in jax 0.7 to 0.11) else Triton. ``core_map``/``mpmd_map`` pick by their mesh.
    """
    import jax

    if primitive == "pallas_call":
        backend = params.get("backend")  # jax 0.6 names it ("mosaic_gpu" for plgpu.kernel)
        if isinstance(backend, str) and backend:
            return _kind_named(backend)
        compiler_params = params.get("compiler_params")
        if isinstance(compiler_params, Mapping) and compiler_params:
            kinds = [_kind_named(str(key)) for key in compiler_params]
            matching = [k for k in kinds if k is not None and interpreter_for(platform, k)]
            return (matching or kinds)[0]
        if compiler_params is not None and not isinstance(compiler_params, Mapping):
            return _kind_named(type(compiler_params).__module__)
        if platform == "tpu":
            return "mosaic_tpu"
        if platform == "cuda" and getattr(jax.config, "jax_pallas_use_mosaic_gpu", False):
            return "mosaic_gpu"
        return "triton"
    if primitive in ("core_map", "mpmd_map"):
        meshes = params.get("meshes") or (params.get("mesh"),)
        found = {_kind_named(type(mesh).__module__) for mesh in meshes if mesh is not None}
        return found.pop() if len(found) == 1 else None
    return None


def interpret_params(interpreter: Interpreter) -> object:
    """The ``interpret`` parameter that runs a kernel in ``interpreter`` with this JAX,
    else ``None`` (its public API is missing: the release predates it)."""
    if interpreter is GENERIC_INTERPRET:
        return True
    try:
        if interpreter is TPU_INTERPRET:
            from jax.experimental.pallas import tpu as pltpu

            params = getattr(pltpu, "InterpretParams", None)
        elif interpreter is GPU_INTERPRET:
            from jax.experimental.pallas import mosaic_gpu as plgpu

            params = getattr(plgpu, "InterpretGPUParams", None)
        else:
            return None
    except ImportError:  # Mosaic GPU without absl-py (missing_package)
        return None
    return None if params is None else params()


def reset_interpreters(names: set[str]) -> None:
    """After a failure inside an interpreted kernel, reset the interpreters' global state
    (JAX asks for it: the next interpreted kernel would fail otherwise)."""
    if TPU_INTERPRET.name in names:
        from jax.experimental.pallas import tpu as pltpu

        reset = getattr(pltpu, "reset_tpu_interpret_mode_state", None)
        if reset is not None:
            reset()
    if GPU_INTERPRET.name in names:
        try:
            from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call
        except ImportError:
            return
        reset = getattr(interpret_pallas_call, "reset_gpu_interpret_mode_state", None)
        if reset is not None:
            reset()


def linear_solve_body(
    params: Mapping[str, Any], values: list[object]
) -> tuple[Any, list[object]] | None:
    """``(solve jaxpr, its operands)`` of a ``custom_linear_solve`` equation: what its forward
    pass runs (``jax.lax.custom_linear_solve``'s implementation: ``solve`` on its constants
    and the right-hand side), or ``None`` where this release's parameters differ."""
    lengths: Any = params.get("const_lengths")
    jaxprs: Any = params.get("jaxprs")
    try:
        before = int(lengths.matvec) + int(lengths.vecmat)
        solve = int(lengths.solve)
        total = before + solve + int(lengths.transpose_solve)
        body = jaxprs.solve
    except AttributeError:
        return None
    return body, [*values[before : before + solve], *values[total:]]
