"""Tests of pytest_jaxport.model.platforms and the tables derived from it.

Targets as data (issue 41): each platform is described once in
``pytest_jaxport/model/platforms.py``, and every table that names platforms is derived from
those descriptions, so adding a platform is one description plus tests."""

from __future__ import annotations

import pytest

from pytest_jaxport.model import (
    classification,
    config,
    devices,
    emulation,
    hints,
    platforms,
    roofline,
    tooling_rules,
)
from pytest_jaxport.model.platforms import DESCRIPTIONS, needs_newer_jax, release


def test_every_table_that_names_platforms_is_derived_from_the_descriptions() -> None:
    names = tuple(DESCRIPTIONS)
    assert names == platforms.PLATFORMS
    assert tuple(n for n in names if DESCRIPTIONS[n].default) == config.DEFAULT_PLATFORMS
    assert tuple(n for n in names if DESCRIPTIONS[n].compiled) == config.COMPILE_PLATFORMS
    assert tuple(n for n in names if DESCRIPTIONS[n].emulated) == emulation.EMULATED_PLATFORMS
    for name, described in DESCRIPTIONS.items():
        assert platforms.PLATFORM_VENDORS[name] == described.vendor
        assert platforms.PLATFORM_ALIASES[name] == described.aliases
        assert classification.COLLECTIVE_LIBRARIES[name] == described.collectives
        assert devices.GENERATIONS[name] == described.generations
        if described.default_description is not None:
            device = devices.DEFAULT_DEVICES[name]
            assert (device.generation, device.name) == (
                described.default_description.generation,
                described.default_description.label,
            )
        for entry in described.devices:
            for short in entry.names:
                assert devices.DEVICE_NAMES[short] == devices.Device(
                    platform=name, generation=entry.generation, name=entry.label_of(short)
                )
        if described.peak is not None:
            assert roofline.DEFAULT_PEAKS[name].flops == described.peak.flops
            assert roofline.DEFAULT_PEAKS[name].source == described.peak.source
        for pattern, result in described.custom_calls.items():
            # the first row of the platform's own that matches its glob is the description's
            # (a literal name stands for itself; a glob for a name it matches)
            name_ = pattern.replace("*", "x")
            assert classification.classify(name, "stablehlo.custom_call", name_) in (
                result,
                *described.custom_calls.values(),
            )
        for pattern in described.tooling:
            assert pattern.id in tooling_rules.rule_ids()


def test_each_device_is_described_once_with_its_facts() -> None:
    """A device's short names, generation, label and peak rates are one declaration: a name
    means one device, a platform's default is one of its devices, and the platform's rates
    (the estimate's where it is absent) are its default device's."""
    names = [n for p in DESCRIPTIONS.values() for d in p.devices for n in d.names]
    assert len(names) == len(set(names))
    for described in DESCRIPTIONS.values():
        assert bool(described.default_device) == (described.default_description is not None)
        assert described.peak is (
            described.default_description.peak if described.default_description else None
        )
        for entry in described.devices:
            assert entry.generation in described.generations
            assert set(entry.labels) <= set(entry.names)
            assert entry.peak is None or entry is described.default_description
    assert DESCRIPTIONS["tpu"].default_description is not None
    assert DESCRIPTIONS["tpu"].default_description.peak is not None
    assert devices.DEVICE_NAMES["trillium"].name == "TPU v6e (Trillium)"
    assert devices.DEVICE_NAMES["v6e"].name == "TPU v6e"


def test_oneapi_is_opted_into_and_its_libraries_are_intels() -> None:
    oneapi = DESCRIPTIONS["oneapi"]
    assert "oneapi" not in config.DEFAULT_PLATFORMS
    assert config.default_migrate_to(("cpu", "cuda", "oneapi")) == ("oneapi",)
    assert config.default_migrate_to(config.DEFAULT_PLATFORMS) == config.DEFAULT_MIGRATE_TO
    assert classification.libraries("oneapi") >= {"onemkl", "onednn", "oneccl", "jaxlib"}
    assert set(oneapi.sources) >= {"onemkl", "onednn", "oneccl", "jaxlib"}
    assert classification.classify("oneapi", "stablehlo.custom_call", "oneapisolver_syevd_ffi") == (
        classification.Classification(layer="vendor", kind="solver", library="onemkl")
    )
    assert classification.classify("oneapi", "stablehlo.all_reduce").library == "oneccl"
    assert classification.classify("oneapi", "stablehlo.triangular_solve").library == "onemkl"
    assert "oneapi" not in classification.COUNTERPART_LIBRARIES
    assert "gpu" in oneapi.aliases
    assert hints.platforms_meant("gpu") == ("cuda", "rocm", "oneapi")


@pytest.mark.parametrize(
    ("installed", "refused"),
    [("0.6.2", True), ("0.10.2", True), ("0.11.2", True), ("0.12.0", False),
     ("0.12.0.1", False), ("0.13.0.dev20270101", False), ("", False)],
)  # fmt: skip
def test_oneapi_needs_the_release_its_description_names(installed: str, refused: bool) -> None:
    said = needs_newer_jax("oneapi", installed)
    assert (said is not None) == refused
    if said is not None:
        assert said.startswith(f"oneapi needs jax 0.12.0 or newer, found jax {installed}: ")
    assert needs_newer_jax("cuda", installed) is None


def test_releases_compare_as_numbers() -> None:
    assert release("0.10.2") < release("0.12.0") <= release("0.12.0.1") < release("1.0")
    assert release("0.12.0rc1") == (0, 12, 0)


def test_the_gpus_jax_is_told_about_are_derived_from_the_descriptions() -> None:
    """``_jax``'s GPU platforms and the device kind a trace describes for each (issue 41:
    cuda and rocm were written out there, and oneapi had none)."""
    from pytest_jaxport._jax import adapters

    gpus = tuple(n for n, d in DESCRIPTIONS.items() if d.jax_gpu)
    assert gpus == adapters.GPU_PLATFORMS
    assert "oneapi" in gpus
    assert set(adapters.DESCRIBED_GPUS) == set(gpus)
    for name in gpus:
        assert adapters.DESCRIBED_GPUS[name] == DESCRIPTIONS[name].jax_device_kind != ""
    assert adapters.DESCRIBED_GPUS["cuda"] == "NVIDIA H100"  # a Pallas GpuVersion name
    assert adapters.DESCRIBED_GPUS["rocm"] == "gfx942"  # a gfx architecture
