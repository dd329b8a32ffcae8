"""Tests of pytest_jaxport.model.classification: CLASSIFICATION_RULES row by row.

The classification table, row by row where it matters."""

from __future__ import annotations

import pytest

from pytest_jaxport.model.classification import (
    CLASSIFICATION_RULES,
    LAYERS,
    Classification,
    classify,
    libraries,
)
from pytest_jaxport.model.platforms import PLATFORMS


@pytest.mark.parametrize(
    ("platform", "op", "target", "layer", "library"),
    [
        ("cuda", "stablehlo.dot_general", None, "vendor", "cublas"),
        ("cuda", "stablehlo.convolution", None, "vendor", "cudnn"),
        ("cuda", "stablehlo.fft", None, "vendor", "cufft"),
        ("cuda", "stablehlo.triangular_solve", None, "vendor", "cublas"),
        ("cuda", "stablehlo.cholesky", None, "vendor", "cusolver"),  # jax 0.6/0.7
        ("cuda", "stablehlo.all_gather", None, "vendor", "nccl"),
        ("cuda", "stablehlo.collective_broadcast", None, "vendor", "nccl"),
        ("cuda", "stablehlo.custom_call", "cusolver_syevd_ffi", "vendor", "cusolver"),
        ("cuda", "stablehlo.custom_call", "cusparse_gtsv2_ffi", "vendor", "cusparse"),
        ("cuda", "stablehlo.custom_call", "__cudnn$fmhaSoftmax", "vendor", "cudnn"),
        ("cuda", "stablehlo.custom_call", "cu_lu_pivots_to_permutation", "vendor", "jaxlib"),
        ("cuda", "stablehlo.custom_call", "cuhybrid_eig_real", "vendor", "jaxlib"),
        ("rocm", "stablehlo.dot_general", None, "vendor", "hipblas"),
        ("rocm", "stablehlo.convolution", None, "vendor", "miopen"),
        ("rocm", "stablehlo.fft", None, "vendor", "hipfft"),
        ("rocm", "stablehlo.cholesky", None, "vendor", "hipsolver"),
        ("rocm", "stablehlo.reduce_scatter", None, "vendor", "rccl"),
        ("rocm", "stablehlo.custom_call", "hipsolver_getrf_ffi", "vendor", "hipsolver"),
        ("rocm", "stablehlo.custom_call", "hipsparse_gtsv2_ffi", "vendor", "hipsparse"),
        ("rocm", "stablehlo.custom_call", "hip_lu_pivots_to_permutation", "vendor", "jaxlib"),
        ("rocm", "stablehlo.custom_call", "__cudnn$convForward", "vendor", "miopen"),
        ("rocm", "stablehlo.custom_call", "__cublas$lt$matmul", "vendor", "hipblaslt"),
        ("tpu", "stablehlo.dot_general", None, "xla", None),
        # the linear algebra libtpu compiles into the TPU runtime's routines (issue 48)
        ("tpu", "stablehlo.cholesky", None, "vendor", "libtpu"),
        ("tpu", "stablehlo.triangular_solve", None, "vendor", "libtpu"),
        ("tpu", "stablehlo.custom_call", "Eigh", "vendor", "libtpu"),
        ("tpu", "stablehlo.custom_call", "Qr", "vendor", "libtpu"),
        ("tpu", "stablehlo.custom_call", "LuDecomposition", "vendor", "libtpu"),
        (
            "tpu",
            "stablehlo.custom_call",
            "ProductOfElementaryHouseholderReflectors",
            "vendor",
            "libtpu",
        ),
        ("tpu", "stablehlo.custom_call", "ApproxTopK", "xla", None),
        ("cpu", "stablehlo.custom_call", "lapack_sgetrf_ffi", "vendor", "lapack"),
        ("cpu", "stablehlo.fft", None, "vendor", "ducc"),
        ("cpu", "stablehlo.dot_general", None, "xla", None),
        ("cpu", "stablehlo.convolution", None, "xla", None),
    ],
)
def test_rules(platform: str, op: str, target: str | None, layer: str, library: str | None) -> None:
    result = classify(platform, op, target)
    assert (result.layer, result.library) == (layer, library)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize(
    ("target", "layer", "kind"),
    [
        ("__gpu$xla.gpu.triton", "custom", "pallas-triton"),
        ("mosaic_gpu_v2", "custom", "pallas-mosaic-gpu"),
        ("tpu_custom_call", "custom", "pallas-mosaic-tpu"),
        ("triton_kernel_call", "custom", "jax-triton"),
        ("some_unknown_target", "custom", "ffi"),
        ("Sharding", "meta", "annotation"),
        ("SPMDFullToShardShape", "meta", "annotation"),
        ("shape_assertion", "meta", "annotation"),
        ("annotate_device_placement", "meta", "annotation"),
        ("AllocateBuffer", "meta", "annotation"),
        ("xla_ffi_python_cpu_callback", "meta", "host-callback"),
        ("xla_python_gpu_callback", "meta", "host-callback"),
    ],
)
def test_everywhere_rules(platform: str, target: str, layer: str, kind: str) -> None:
    assert classify(platform, "stablehlo.custom_call", target) == Classification(
        layer=layer,
        kind=kind,  # type: ignore[arg-type]
    )


def test_same_name_means_different_libraries_per_platform() -> None:
    assert classify("cuda", "stablehlo.custom_call", "__cudnn$convForward").library == "cudnn"
    assert classify("rocm", "stablehlo.custom_call", "__cudnn$convForward").library == "miopen"


def test_cuda_names_are_custom_on_other_platforms() -> None:
    # A cuSOLVER call in a TPU program can only be a user's own kernel named alike.
    assert classify("tpu", "stablehlo.custom_call", "cusolver_getrf_ffi").layer == "custom"


def test_table_is_well_formed() -> None:
    for rule in CLASSIFICATION_RULES:
        assert rule.result.layer in LAYERS
        assert (rule.result.library is not None) == (rule.result.layer == "vendor")
        assert rule.platforms is None or rule.platforms <= set(PLATFORMS)
    assert "cublas" in libraries("cuda")
    assert "cublas" not in libraries("rocm")
    assert libraries("tpu") == {"libtpu"}  # the TPU runtime's routines


@pytest.mark.parametrize(
    ("target", "layer", "library", "kind"),
    [
        ("LuDecompositionBlock", "vendor", "libtpu", "lu"),
        ("LuRealDecompositionBlock", "vendor", "libtpu", "lu"),  # libtpu 0.0.50 and later
        ("InvertDiagBlocksLowerTriangular", "vendor", "libtpu", "triangular-inverse"),
        ("InvertDiagBlocksUpperTriangular", "vendor", "libtpu", "triangular-inverse"),
        ("EighTpu", "vendor", "libtpu", "eigh"),
        ("QrDecompositionBlock", "vendor", "libtpu", "qr"),
        ("CompactWyHelper", "vendor", "libtpu", "qr"),
        ("Cholesky", "vendor", "libtpu", "cholesky"),
        ("TopK", "vendor", "libtpu", "topk"),
        ("PartialReduce", "vendor", "libtpu", "approx-topk"),
        ("AssumeGatherIndicesInBound", "meta", None, "annotation"),
        ("GatherScatterIndicesBitpacked", "meta", None, "annotation"),
        ("AllocateBuffer", "meta", None, "annotation"),
        ("X64SplitHigh", "meta", None, "annotation"),
        ("X64Combine", "meta", None, "annotation"),
        ("tpu_custom_call", "custom", None, "pallas-mosaic-tpu"),
    ],
)
def test_tpu_runtime_routines_at_the_compiled_level(
    target: str, layer: str, library: str | None, kind: str
) -> None:
    """The TPU compiler's own custom calls (shared/research/tpu.md §3a): the runtime's
    routines are libtpu's, its bookkeeping meta, Mosaic's kernels hand-written."""
    found = classify("tpu", "hlo.custom_call", target, level="compiled")
    assert (found.layer, found.library, found.kind) == (layer, library, kind)


def test_tpu_runtime_routines_are_not_libraries_elsewhere() -> None:
    """The rows are the TPU's, at the compiled level: on cuda the same name is an unknown
    kernel, and a lowered tpu program naming one is not re-read as the runtime's."""
    assert classify("cuda", "hlo.custom_call", "EighTpu", level="compiled").layer == "custom"
    assert classify("tpu", "stablehlo.custom_call", "EighTpu").layer == "custom"
    collective = classify("tpu", "hlo.all_reduce", level="compiled")
    assert (collective.layer, collective.kind) == ("xla", "ici-collective")


def test_the_indexed_table_agrees_with_reading_every_row() -> None:
    """``classify`` narrows the default table per platform, level and kind of name; reading
    every row in order (any other ``rules``) must give the same answer for every name."""
    names = {rule.pattern.replace("*", "x") for rule in CLASSIFICATION_RULES} | {
        "stablehlo.add",
        "my_kernel",
    }
    for platform in PLATFORMS:
        for level in ("lowered", "compiled"):
            for name in names:
                for op, target in (
                    (name, None),
                    ("stablehlo.custom_call", name),
                ):
                    expected = classify(
                        platform, op, target, level=level, rules=list(CLASSIFICATION_RULES)
                    )
                    assert classify(platform, op, target, level=level) == expected, (
                        platform,
                        level,
                        op,
                        target,
                    )
