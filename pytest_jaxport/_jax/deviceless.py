"""Compile for CUDA without a GPU, against a target description, and capture descriptions.

XLA's CUDA compiler runs on any machine once the jax CUDA plugin is installed: a topology
built from a text ``stream_executor.GpuTargetConfigProto`` stands in for the device, and
``jit(...).lower().compile()`` then performs a *deviceless* compilation whose optimized HLO
shows the real cuBLAS / cuDNN / cuFFT / Triton dispatches. Deviceless compilation does not
autotune, so Triton-versus-library picks can differ from a real GPU.

JAX is imported lazily, inside the functions, so importing this module stays cheap.

Example (needs the plugin; run with ``JAX_PLATFORMS=cpu`` where no GPU is present)::

    text = deviceless_compile(jnp.fft.fft, (jnp.zeros(8, jnp.complex64),), {},
                              target_config=load_gpu_description("h100"))

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_jaxport._jax.adapters import gpu_description, needs_hardware
from pytest_jaxport._jax.callbacks import InertCallbacks, inert
from pytest_jaxport.model.gpu import SHIPPED_GPUS, described_kind, load_gpu_description
from pytest_jaxport.version import requirement

if TYPE_CHECKING:
    import jax

_CUDA_MAJORS = ("12", "13")


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _install_line(major: str, version: str) -> str:
    return f'pip install "jax-cuda{major}-plugin=={version}" "jax-cuda{major}-pjrt=={version}"'


def cuda_plugin_problem() -> str | None:
    """``None`` when deviceless CUDA compilation works here; otherwise one message saying why.

    The message names the exact ``pip install`` line for the installed jaxlib and says that
    ``JAX_PLATFORMS=cpu`` is needed where no GPU is present. Never raises.
    """
    jaxlib_version = _installed("jaxlib")
    if jaxlib_version is None:
        return "jaxlib is not installed: install jax and jaxlib first"
    pairs = {
        major: (_installed(f"jax-cuda{major}-plugin"), _installed(f"jax-cuda{major}-pjrt"))
        for major in _CUDA_MAJORS
    }
    present = {major: pair for major, pair in pairs.items() if any(pair)}
    matching = [major for major, pair in present.items() if pair == (jaxlib_version,) * 2]
    if not matching:
        major = next(iter(present), "12")
        install = _install_line(major, jaxlib_version)
        if not present:
            return (
                "compiling for cuda without a GPU needs the jax CUDA plugin, which is not "
                f'installed; pip install "{requirement("cuda")}" installs it at your jax '
                f"version (or: {install}; no nvidia-* wheels needed), and run with "
                "JAX_PLATFORMS=cpu where no GPU is present"
            )
        plugin, pjrt = present[major]
        return (
            f"the jax CUDA plugin does not match jaxlib {jaxlib_version} "
            f"(jax-cuda{major}-plugin {plugin or 'missing'}, jax-cuda{major}-pjrt "
            f"{pjrt or 'missing'}); install the matching pair: {install}"
        )
    try:
        _topology_device(load_gpu_description(SHIPPED_GPUS[0]))
    except Exception as error:  # the plugin loader raises anything; report, never a traceback
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return (
            f"jax-cuda{matching[0]}-plugin {jaxlib_version} is installed but JAX cannot "
            f"build a cuda topology ({first_line}); where no GPU is present, set "
            "JAX_PLATFORMS=cpu in the environment before JAX starts (for example "
            "`JAX_PLATFORMS=cpu pytest`)"
        )
    return None


def prefer_deviceless() -> bool:
    """Restrict JAX to its CPU backend where no CUDA driver exists, so the plugin compiles.

    Without a driver the CUDA plugin fails its start-up checks (JAX logs a traceback) and
    never registers, unless JAX runs with ``JAX_PLATFORMS=cpu``. This sets that for the
    current process when it is safe: JAX's backends have not started, the user chose no
    platforms, and ``libcuda.so.1`` cannot be loaded (so no GPU could be used anyway).
    Returns whether it changed anything.
    """
    import ctypes
    import os

    if os.environ.get("JAX_PLATFORMS"):
        return False
    import jax
    from jax._src import config, xla_bridge

    if config.jax_platforms.value or xla_bridge.backends_are_initialized():
        return False
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
        return True
    return False


@functools.lru_cache(maxsize=16)
def _topology_device(target_config: str) -> jax.Device:
    """A compile-only CUDA device for ``target_config``, built once per description."""
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(
        platform="cuda", target_config=target_config, topology="1x1x1"
    )
    device: jax.Device = topology.devices[0]
    return device


def _abstract(leaf: Any, sharding: jax.sharding.Sharding) -> object:
    import jax
    import numpy as np

    if isinstance(leaf, jax.ShapeDtypeStruct) or hasattr(leaf, "shape"):
        weak = bool(getattr(leaf, "weak_type", False))
        return jax.ShapeDtypeStruct(  # type: ignore[no-untyped-call]
            leaf.shape, leaf.dtype, sharding=sharding, weak_type=weak
        )
    if isinstance(leaf, (bool, int, float, complex)):
        dtype = jax.dtypes.canonicalize_dtype(np.asarray(leaf).dtype)
        return jax.ShapeDtypeStruct(  # type: ignore[no-untyped-call]
            (), dtype, sharding=sharding, weak_type=True
        )
    return leaf


def deviceless_compile(
    fn: Callable[..., object],
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    target_config: str,
    compiler_options: Mapping[str, object] | None = None,
) -> str:
    """Compile ``fn(*args, **kwargs)`` for the CUDA GPU ``target_config`` describes; the
    post-optimization HLO text (:func:`deviceless_executable` says how)."""
    executable = deviceless_executable(
        fn, args, kwargs, target_config=target_config, compiler_options=compiler_options
    )
    text: str = executable.as_text()
    return text


def deviceless_executable(
    fn: Callable[..., object],
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    target_config: str,
    compiler_options: Mapping[str, object] | None = None,
) -> Any:
    """Compile ``fn(*args, **kwargs)`` for the CUDA GPU ``target_config`` describes.

    Returns the compiled program (a ``jax.stages.Compiled``: its ``as_text()``, its
    ``memory_analysis()``), never run. Array leaves (arrays or ``ShapeDtypeStruct``)
    and Python scalars are traced abstractly, placed on the described device; bind any
    static argument with ``functools.partial``. ``compiler_options`` are XLA options such
    as ``{"xla_gpu_enable_triton_gemm": False}``. Call :func:`cuda_plugin_problem` first
    for a clear message when the plugin is missing.
    """
    import jax

    sharding = jax.sharding.SingleDeviceSharding(_topology_device(target_config))
    abstract_args, abstract_kwargs = jax.tree.map(
        lambda leaf: _abstract(leaf, sharding), (tuple(args), dict(kwargs))
    )

    def trace() -> InertCallbacks:
        # A compile-only GPU has no client for a host callback to call back into: each
        # callback becomes a stand-in that compiles (callbacks.inert, compilable).
        traced = jax.jit(fn).trace(*abstract_args, **abstract_kwargs)
        return inert(traced, compilable=True)

    try:
        lowered = trace().lower()
    except Exception as e:  # JAX may ask which GPU this is (Pallas on jax 0.11+): describe it
        description = None
        if needs_hardware(f"{type(e).__name__}: {e}"):
            description = gpu_description("cuda", described_kind(target_config) or None)
        if description is None:
            raise
        with description:
            traced = trace()
        lowered = traced.lower()
    options = dict(compiler_options) if compiler_options else None
    return lowered.compile(compiler_options=options)


def deviceless_compile_partitioned(
    lowered: Any,
    partitions: int,
    *,
    target_config: str,
    compiler_options: Mapping[str, object] | None = None,
) -> str:
    """Compile a sharded program, lowered for cuda, for ``partitions`` GPUs of
    ``target_config``; the post-optimization HLO text (one device's program:
    :func:`deviceless_partitioned_executable` says how)."""
    executable = deviceless_partitioned_executable(
        lowered, partitions, target_config=target_config, compiler_options=compiler_options
    )
    text: str = executable.hlo_modules()[0].to_string()
    return text


def deviceless_partitioned_executable(
    lowered: Any,
    partitions: int,
    *,
    target_config: str,
    compiler_options: Mapping[str, object] | None = None,
) -> Any:
    """Compile a sharded program, lowered for cuda, for ``partitions`` GPUs of
    ``target_config``; the compile-only client's executable (its ``hlo_modules()``, one
    device's program, and ``get_compiled_memory_stats()``, one device's memory).

    The program was traced on this machine's devices (a ``Mesh`` of host devices): its
    shardings, ``shard_map`` meshes and sharding constraints name those devices, so it
    cannot be traced again on a topology's devices. Its lowering names none (only mesh
    axes and device ids), so the CUDA compiler partitions and optimizes that module for a
    ``1x1x<partitions>`` topology of the described GPU: collectives become the NCCL calls
    a GPU run makes (XLA combines small all-reduces into one).
    """
    import numpy as np
    from jax._src import compiler
    from jax._src.lib import xla_client  # type: ignore[attr-defined]

    devices = _topology_devices(target_config, partitions)
    overrides: Any = dict(compiler_options) if compiler_options else None
    options = compiler.get_compile_options(
        num_replicas=1,
        num_partitions=partitions,
        device_assignment=np.array(devices, dtype=object).reshape(1, partitions),
        env_options_overrides=overrides,
    )
    return devices[0].client.compile(
        lowered.compiler_ir("stablehlo"),
        executable_devices=xla_client.DeviceList(devices),
        compile_options=options,
    )


@functools.lru_cache(maxsize=16)
def _topology_devices(target_config: str, count: int) -> tuple[jax.Device, ...]:
    """``count`` compile-only CUDA devices of one host, for ``target_config``, by id."""
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(
        platform="cuda", target_config=target_config, topology=f"1x1x{count}"
    )
    return tuple(sorted(topology.devices, key=lambda device: device.id))


def capture_target() -> str:
    """The text ``GpuTargetConfigProto`` of this machine's first CUDA GPU.

    Asks the CUDA plugin for a topology without a description, which makes it describe the
    attached device (what XLA's compiler sees: SM count, clocks, memory, cache and shared
    memory limits, cuDNN and CUDA runtime versions), then checks that the text builds a
    deviceless topology. Raises ``RuntimeError`` with one clear line where there is no
    CUDA GPU or plugin.
    """
    problem = cuda_plugin_problem()
    if problem is not None:
        raise RuntimeError(problem)
    from jax._src import xla_bridge

    try:
        topology = xla_bridge.make_pjrt_topology("cuda", "")
        text = str(topology.target_config)
    except Exception as error:  # no GPU, no driver: the plugin says so in its own words
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise RuntimeError(
            f"cannot capture a GPU target here: the CUDA plugin found no GPU to describe "
            f"({first_line}); run `jaxport capture-target` on the machine with the GPU"
        ) from None
    _topology_device(text)
    kind = described_kind(text) or "unknown device"
    jaxlib_version = _installed("jaxlib")
    header = (
        "# proto-message: stream_executor.GpuTargetConfigProto\n"
        f"# Captured by pytest-jaxport from {kind} (jaxlib {jaxlib_version}).\n"
    )
    return header + text
