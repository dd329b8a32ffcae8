"""What this machine runs: the platforms with a device here, the one plain ``jax.jit`` runs
on, a device's kind, and the installed JAX's versions.

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools

from pytest_jaxport.model.platforms import JAX_GPU, PLATFORMS


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


def memory_limit(platform: str) -> int | None:
    """The memory this machine's first ``platform`` device holds for programs, as its runtime
    says (``memory_stats()["bytes_limit"]``: a TPU's, a GPU's); ``None`` where it says none
    (the CPU)."""
    import jax

    try:
        stats = jax.devices(platform)[0].memory_stats()
    except Exception:  # a backend without memory statistics
        return None
    limit = stats.get("bytes_limit") if isinstance(stats, dict) else None
    return limit if isinstance(limit, int) and limit > 0 else None


def versions() -> dict[str, str]:
    """jax and jaxlib versions, for reports and cache keys."""
    return dict(_versions())


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    # importlib.metadata scans sys.path on every call (about 1.5 ms): once per process
    from importlib.metadata import version

    return (("jax", version("jax")), ("jaxlib", version("jaxlib")))
