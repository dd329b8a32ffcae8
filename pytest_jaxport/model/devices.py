"""The device catalogue: the device each platform's findings are judged for, and the names a
configuration may give one.

Every device is described once, with its facts, in its platform's description
(:attr:`pytest_jaxport.model.platforms.Platform.devices`: its short names, generation, label
and peak rates); this module derives the lookups from them: :data:`GENERATIONS`,
:data:`DEFAULT_DEVICES`, :data:`DEVICE_NAMES`, :func:`device_for`, and the device a GPU
description (a ``GpuTargetConfigProto``) describes.

Example::

    >>> str(device_for("rocm", "mi300")), str(DEFAULT_DEVICES["tpu"])
    ('AMD MI300X (gfx942)', 'TPU v5e (v5e)')

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_jaxport.model.platforms import DESCRIPTIONS, DeviceDescription

CUDA_GENERATIONS = DESCRIPTIONS["cuda"].generations
"""NVIDIA compute capabilities, oldest first (``sm90``: Hopper, H100/H200)."""
ROCM_GENERATIONS = DESCRIPTIONS["rocm"].generations
"""AMD Instinct ISAs, oldest first: MI100, MI200 (CDNA2), MI300 (CDNA3), MI350 (CDNA4)."""
TPU_GENERATIONS = DESCRIPTIONS["tpu"].generations
"""TPU chip versions as JAX names them (``jax.experimental.pallas.tpu.ChipVersion``)."""

GENERATIONS: Mapping[str, tuple[str, ...]] = {p.name: p.generations for p in DESCRIPTIONS.values()}
"""Each platform's device generations, from its description
(:mod:`pytest_jaxport.model.platforms`); oneapi's: ``bmg`` (Arc B-series, Xe2) and ``pvc``
(Data Center GPU Max, Xe-HPC)."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Device:
    """The device a platform's findings are judged for: a generation of :data:`GENERATIONS`
    (``""`` for cpu)."""

    platform: str
    generation: str = ""
    name: str = ""
    """What reports call it (``NVIDIA H100``); the generation where empty."""
    compiler: str = ""
    """The release of the platform's compiler (:data:`COMPILERS`) the findings are judged
    for, where known (tpu: the libtpu installed, ``0.0.42.1``); empty where unknown: then a
    rule a later release lifted still applies, saying which releases it holds for."""
    topology: str = ""
    """The slice a partitioned program compiles for (``2x2`` of ``tpu = "v5e:2x2"``); empty:
    the generation's smallest with enough devices."""

    def __str__(self) -> str:
        generation = f"{self.generation}:{self.topology}" if self.topology else self.generation
        if self.name:
            return f"{self.name} ({generation})" if generation else self.name
        return generation or self.platform


COMPILERS: Mapping[str, str] = {"tpu": "libtpu"}
"""The compiler whose release decides what a platform compiles, where a format rule depends
on it (:attr:`pytest_jaxport.model.format_rules.FormatRule.releases`): libtpu for tpu (the
compiled program follows libtpu, not jax)."""


DEFAULT_DEVICES: Mapping[str, Device] = {
    p.name: Device(
        platform=p.name,
        generation=p.default_description.generation,
        name=p.default_description.label,
    )
    if p.default_description is not None
    else Device(platform=p.name)
    for p in DESCRIPTIONS.values()
}
"""Judged for when no device is configured: the project's default GPU description (h100),
the GPU JAX describes where it lowers for rocm (gfx942), TPU v5e (a 128x128 MXU and no
FP8 matrix units, as every TPU before v6e), Intel's Data Center GPU Max 1550 (pvc)."""


def default_devices(platforms: Sequence[str] = ()) -> dict[str, Device]:
    """:data:`DEFAULT_DEVICES` of the platforms lowered by default and of ``platforms`` (an
    opted-in platform's device is judged, and recorded, only where a project names it).

    >>> sorted(default_devices()), "oneapi" in default_devices(["cpu", "oneapi"])
    (['cpu', 'cuda', 'rocm', 'tpu'], True)
    """
    return {
        name: device
        for name, device in DEFAULT_DEVICES.items()
        if DESCRIPTIONS[name].default or name in platforms
    }


DEVICE_NAMES: Mapping[str, Device] = {
    name: Device(platform=p.name, generation=described.generation, name=described.label_of(name))
    for p in DESCRIPTIONS.values()
    for described in p.devices
    for name in described.names
}
"""Devices by the short names a configuration may use (``h100``, ``mi300``, ``v5e``,
``max1550``)."""


def described_device(platform: str, generation: str) -> DeviceDescription | None:
    """The description of ``platform``'s device of ``generation`` (its facts: peak rates,
    capacity), where one generation is one device; ``None`` where it is none or several.

    >>> described_device("tpu", "v5e").capacity_bytes
    16909336064
    """
    found = [
        d for d in DESCRIPTIONS[platform].devices if d.generation == generation
    ] if platform in DESCRIPTIONS else []  # fmt: skip
    return found[0] if len(found) == 1 else None


def device_for(platform: str, name: str | None = None) -> Device:
    """The device ``name`` (a :data:`DEVICE_NAMES` key or a generation such as ``sm90``,
    ``gfx942``, ``v6e``) on ``platform``; the platform's default without a name. Raises
    ``ValueError`` naming what is known for anything else.

    >>> str(device_for("rocm", "mi350"))
    'AMD MI350X (gfx950)'
    """
    if not name:
        return DEFAULT_DEVICES.get(platform, Device(platform=platform))
    key = name.strip().lower().replace(" ", "").replace("-", "")
    found = DEVICE_NAMES.get(key)
    if found is not None and found.platform == platform:
        return found
    generations = GENERATIONS.get(platform, ())
    if key in generations:
        return Device(platform=platform, generation=key)
    known = sorted(
        {n for n, d in DEVICE_NAMES.items() if d.platform == platform} | set(generations)
    )
    raise ValueError(
        f"unknown {platform} device {name!r}; expected one of: {', '.join(known) or '(none)'}"
    )


_CUDA_CAPABILITY = re.compile(r"cuda_compute_capability\s*\{([^}]*)\}")
_GCN_ARCH = re.compile(r'gcn_arch_name:\s*"(gfx[0-9a-f]+)')
_DESCRIPTION = re.compile(r'device_description_str:\s*"([^"]*)"')


def device_from_gpu_description(text: str) -> Device:
    """The device a GPU description (a ``GpuTargetConfigProto`` as text, as ``[tool.jaxport]
    target`` names one) describes. Raises ``ValueError`` when it names no compute capability.

    >>> str(device_from_gpu_description('gpu_device_info { cuda_compute_capability { major: 9 } }'
    ...                                 ' device_description_str: "NVIDIA H100 80GB HBM3"'))
    'NVIDIA H100 80GB HBM3 (sm90)'
    """
    described = _DESCRIPTION.search(text)
    name = described.group(1) if described else ""
    cuda = _CUDA_CAPABILITY.search(text)
    if cuda is not None:
        fields = dict(re.findall(r"(major|minor):\s*(\d+)", cuda.group(1)))
        generation = f"sm{int(fields.get('major', 0))}{int(fields.get('minor', 0))}"
        return Device(platform="cuda", generation=generation, name=name)
    rocm = _GCN_ARCH.search(text)
    if rocm is not None:
        return Device(platform="rocm", generation=rocm.group(1), name=name)
    raise ValueError("a GPU target description without a CUDA or ROCm compute capability")


def generation_range(platform: str, first: str, last: str | None = None) -> tuple[str, ...]:
    """The generations of ``platform`` from ``first`` to ``last`` (inclusive; the newest
    known where ``None``).

    >>> generation_range("tpu", "v5e", "v6e")
    ('v5e', 'v5p', 'v6e')
    """
    generations = GENERATIONS[platform]
    end = len(generations) if last is None else generations.index(last) + 1
    return generations[generations.index(first) : end]
