"""GPU descriptions (what ``[tool.jaxport] target`` names): the ones shipped in
``pytest_jaxport/gpu_targets/`` (written from public facts) and description files, as text
``stream_executor.GpuTargetConfigProto`` (pure).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from pytest_jaxport.model.platforms import Capacity

SHIPPED_GPUS: tuple[str, ...] = ("a100", "h100", "h200")
"""The descriptions shipped in ``pytest_jaxport/gpu_targets/``."""


def load_gpu_description(name_or_path: str) -> str:
    """The text ``GpuTargetConfigProto`` for a shipped name (``"h100"``, any case) or a file.

    Raises ``ValueError`` naming the value and the shipped names when it is neither.
    """
    key = name_or_path.strip().lower()
    if key in SHIPPED_GPUS:
        resource = importlib.resources.files("pytest_jaxport") / "gpu_targets" / f"{key}.txtpb"
        return resource.read_text(encoding="utf-8")
    path = Path(name_or_path).expanduser()
    shipped = ", ".join(SHIPPED_GPUS)
    if not path.is_file():
        raise ValueError(
            f"GPU target {name_or_path!r} is neither a shipped description ({shipped}) nor "
            "a file; pass one of those names or the path of a text GpuTargetConfigProto "
            "(`jaxport capture-target` writes one on a GPU machine)"
        )
    text = path.read_text(encoding="utf-8")
    if "gpu_device_info" not in text:
        raise ValueError(
            f"GPU target file {str(path)!r} is not a text GpuTargetConfigProto (it has no "
            f"gpu_device_info); use a shipped description ({shipped}) or "
            "`jaxport capture-target` to write one"
        )
    return text


def gpu_capacity(description: str, name: str) -> Capacity | None:
    """The memory of the GPU a description describes (its ``device_memory_size``), where it
    gives one; ``name``: the description's, as the source names it (``h100``, a path).

    >>> gpu_capacity(load_gpu_description("h100"), "h100").bytes / 2**30
    80.0
    """
    found = field_value(description, "device_memory_size")
    if found is None or not found.split("#")[0].strip().isdigit():
        return None
    return Capacity(
        bytes=int(found.split("#")[0].strip()),
        source=f"device_memory_size of the GPU description {name}",
        per="GPU",
    )


def described_kind(description: str) -> str:
    """The device kind a GPU description names (its ``device_description_str``), or ``""``."""
    return field_value(description, "device_description_str") or ""


def field_value(text: str, key: str) -> str | None:
    """The first value of ``key`` in a text proto (``device_description_str``), or ``None``."""
    for line in text.splitlines():
        name, sep, value = line.strip().partition(":")
        if sep and name == key:
            return value.strip().strip('"')
    return None
