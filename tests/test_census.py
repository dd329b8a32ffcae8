"""Tests of pytest_jaxport.model.census (with _jax.stablehlo's reader).

Census of real lowered programs (real JAX, real lowering) and of hand-built programs."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax._src import source_info_util
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from pytest_jaxport._jax import interception, jaxprs, lowering, stablehlo, tracing
from pytest_jaxport.model.census import (
    Census,
    OpSite,
    Program,
    SourceLocation,
    is_library_file,
    location_frames,
    parse_location,
    placed_location,
    take_census,
)
from pytest_jaxport.model.hlo import parse_compiled_hlo
from pytest_jaxport.model.hotspots import Reach, hotspots


def census_of(fn, *args, platform: str) -> Census:
    traced = tracing.trace(fn, args, {})
    return take_census(stablehlo.read_program(lowering.lower(traced, platform)), platform)


def count_in_text(fn, *args, platform: str, needle: str) -> int:
    """An independent count: occurrences of an op in the printed module."""
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()
    return text.count(needle)


def test_private_function_called_three_times_counts_three() -> None:
    @jax.jit
    def helper(x):
        return x @ x

    def f(a):
        return helper(a) + helper(a + 1) + helper(a * 2)

    a = jnp.ones((4, 4))
    assert count_in_text(f, a, platform="cuda", needle="stablehlo.dot_general") == 1
    census = census_of(f, a, platform="cuda")
    assert census.vendor == 3
    assert census.libraries() == {"cublas": 3}
    [kernel] = census.kernels
    assert kernel.count == 3
    assert kernel.location is not None
    assert kernel.location.file == __file__


def test_unrolled_scan_is_weighted_by_calls() -> None:
    def body(carry, w):
        return jnp.tanh(carry @ w), None

    def f(x, ws):
        return jax.lax.scan(body, x, ws, unroll=True)[0]

    x, ws = jnp.ones((2, 8)), jnp.ones((6, 8, 8))
    census = census_of(f, x, ws, platform="cuda")
    assert census.libraries() == {"cublas": 6}


def test_eigh_per_platform() -> None:
    a = jnp.eye(4)

    def f(a):
        return jnp.linalg.eigh(a)[0]

    assert census_of(f, a, platform="cpu").libraries() == {"lapack": 1}
    assert census_of(f, a, platform="cuda").libraries() == {"cusolver": 1}
    assert census_of(f, a, platform="rocm").libraries() == {"hipsolver": 1}
    tpu = census_of(f, a, platform="tpu")
    assert tpu.libraries() == {"libtpu": 1}  # Eigh: the TPU runtime's EighTpu once compiled
    assert tpu.custom == 0
    assert tpu.xla_ops > 0


def test_each_solver_routine_at_one_line_is_its_own_site_with_its_own_label() -> None:
    """An LU solve at one line is two LAPACK routines on cpu (getrf, trsm) and a jaxlib kernel
    beside cuSOLVER's on cuda and rocm; eigh, qr, cholesky and svd are one routine each. Every
    site reads apart (issue 39: "lapack solver" twice, "jaxlib jaxlib-kernel")."""
    a = jnp.eye(4) * 3.0 + 0.1

    def solve(a, b):
        return jnp.linalg.solve(a, b)

    def factorizations(a):
        return jnp.linalg.eigh(a), jnp.linalg.qr(a), jnp.linalg.cholesky(a), jnp.linalg.svd(a)

    def labels(fn: Any, *args: Any, platform: str) -> list[str]:
        reach = Reach(test="t", source="s", census=census_of(fn, *args, platform=platform))
        return sorted(site.what for site in hotspots([reach]))

    assert labels(solve, a, jnp.ones(4), platform="cpu") == ["lapack getrf", "lapack trsm"]
    for platform, solver, blas in (
        ("cuda", "cusolver", "cublas"),
        ("rocm", "hipsolver", "hipblas"),
    ):
        assert labels(solve, a, jnp.ones(4), platform=platform) == [
            f"{blas} triangular-solve",
            f"{solver} getrf",
            "jaxlib lu_pivots",
        ]
    # jax 0.6 and 0.7 lower cholesky on a GPU to stablehlo.cholesky, an op without a routine
    cholesky = "potrf" if jax.__version_info__ >= (0, 8) else "solver"

    def svd(platform: str) -> str:  # Jacobi (gesvdj) or not (jax 0.6 on rocm: gesvd)
        text = jax.jit(jnp.linalg.svd).trace(a).lower(lowering_platforms=(platform,)).as_text()
        return re.findall(r"@[a-z]+solver_(gesvdj?)_ffi", text)[0]

    expected = {
        "cpu": ["lapack geqrf", "lapack gesdd", "lapack orgqr", "lapack potrf", "lapack syevd"],
        **{
            platform: sorted(
                f"{solver} {r}" for r in ("geqrf", svd(platform), "orgqr", cholesky, "syevd")
            )
            for platform, solver in (("cuda", "cusolver"), ("rocm", "hipsolver"))
        },
    }
    for platform, found in expected.items():
        assert labels(factorizations, a, platform=platform) == found, platform


def test_conv_fft_and_solve_on_gpu_platforms() -> None:
    def f(x, k, a, b):
        y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME")
        z = jnp.fft.rfft(y, axis=-1).real.sum()
        return z + jnp.linalg.solve(a, b).sum()

    args = (jnp.ones((1, 2, 8, 8)), jnp.ones((3, 2, 3, 3)), jnp.eye(3), jnp.ones(3))
    cuda = census_of(f, *args, platform="cuda").libraries()
    assert cuda["cudnn"] == 1
    assert cuda["cufft"] == 1
    assert cuda["cusolver"] == 1  # getrf
    assert cuda["jaxlib"] == 1  # cu_lu_pivots_to_permutation
    assert cuda["cublas"] == count_in_text(
        f, *args, platform="cuda", needle="stablehlo.triangular_solve"
    )
    rocm = census_of(f, *args, platform="rocm").libraries()
    assert rocm["miopen"] == 1
    assert rocm["hipfft"] == 1
    cpu = census_of(f, *args, platform="cpu").libraries()
    assert cpu["ducc"] == 1
    assert cpu["lapack"] >= 1
    assert "cudnn" not in cpu


@pytest.mark.filterwarnings(
    "ignore:The Pallas Triton backend is deprecated:DeprecationWarning"
)  # jax 0.12: on purpose
def test_pallas_behind_platform_dependent() -> None:
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def triton(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            compiler_params=pltriton.CompilerParams(),
        )(x)

    def mosaic(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    def f(x):
        return jax.lax.platform_dependent(x, cuda=triton, tpu=mosaic, default=lambda x: x * 2.0)

    x = jnp.ones((8, 128))
    cuda = census_of(f, x, platform="cuda")
    assert [(k.name, k.kind, k.count) for k in cuda.in_layer("custom")] == [
        ("__gpu$xla.gpu.triton", "pallas-triton", 1)
    ]
    tpu = census_of(f, x, platform="tpu")
    assert [(k.name, k.kind) for k in tpu.in_layer("custom")] == [
        ("tpu_custom_call", "pallas-mosaic-tpu")
    ]
    assert census_of(f, x, platform="cpu").custom == 0
    assert census_of(f, x, platform="rocm").custom == 0


def test_unknown_ffi_target_is_custom_everywhere() -> None:
    def f(x):
        return jax.ffi.ffi_call("my_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    for platform in ("cpu", "cuda", "rocm", "tpu"):
        census = census_of(f, jnp.ones(3), platform=platform)
        assert [(k.name, k.layer, k.kind) for k in census.kernels] == [
            ("my_kernel", "custom", "ffi")
        ]


def test_host_callback_is_meta() -> None:
    def f(x):
        jax.debug.callback(lambda v: None, x)
        return x + 1

    census = census_of(f, jnp.ones(3), platform="cpu")
    assert census.meta == 1
    assert census.custom == 0
    assert census.in_layer("meta")[0].kind == "host-callback"


@pytest.mark.parametrize("platform", ["cpu", "cuda", "rocm", "tpu"])
def test_collectives_under_shard_map(platform: str) -> None:
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(jax.devices()[:1], ("i",))

    def f(x):
        return jax.shard_map(
            lambda y: jax.lax.psum(y, "i"),
            mesh=mesh,
            in_specs=PartitionSpec("i"),
            out_specs=PartitionSpec(),
        )(x)

    census = census_of(f, jnp.ones(4), platform=platform)
    expected = {"cuda": {"nccl": 1}, "rocm": {"rccl": 1}}.get(platform, {})
    assert census.libraries() == expected


def test_hand_built_program_weights_and_inherits_locations() -> None:
    program = Program(
        entry="main",
        functions={
            "main": (
                OpSite(op="func.call", target="outer", location='loc("a"("m.py":10:1))'),
                OpSite(op="func.call", target="outer", location='loc("a"("m.py":11:1))'),
                OpSite(op="stablehlo.add"),
            ),
            "outer": (
                OpSite(op="func.call", target="inner"),
                OpSite(op="func.call", target="inner"),
            ),
            "inner": (
                OpSite(op="stablehlo.custom_call", target="cusolver_getrf_ffi", location="loc(x)"),
                OpSite(op="stablehlo.constant"),
                OpSite(op="func.return"),
            ),
        },
    )
    census = take_census(program, "cuda")
    assert census.xla_ops == 1
    assert [(k.location, k.count) for k in census.kernels] == [
        (SourceLocation(file="m.py", line=10), 2),
        (SourceLocation(file="m.py", line=11), 2),
    ]
    assert census.libraries() == {"cusolver": 4}


def test_recursive_program_does_not_loop() -> None:
    program = Program(entry="main", functions={"main": (OpSite(op="func.call", target="main"),)})
    assert take_census(program, "cpu").kernels == ()


def test_parse_location_prefers_user_frames() -> None:
    text = (
        'loc(callsite("f"("/venv/lib/python3.11/site-packages/flax/linen.py":5:1) '
        'at callsite("g"("/home/u/model.py":7:2) at "t"("/home/u/test.py":3:1))))'
    )
    assert parse_location(text) == SourceLocation(file="/home/u/model.py", line=7)
    assert parse_location('loc("eigh")') is None
    assert parse_location(None) is None
    only_library = 'loc("f"("/x/site-packages/a.py":5:1))'
    assert parse_location(only_library) == SourceLocation(file="/x/site-packages/a.py", line=5)


def test_the_plugins_own_frames_are_never_a_location() -> None:
    """The audit's hooks wrap JAX's tracing: a lowering rule JAX implements in Python (traced
    inside a hook) can have the hook as its innermost frame that is not JAX's, and no frame of
    the user's within JAX's location limit. Its line is then the innermost library frame after
    the plugin's (or none), never the plugin's: jax 0.6 placed lineax's eager float64 findings
    at ``pytest_jaxport/_jax/interception.py``."""
    hook = str(Path(interception.__file__))
    library = "/venv/lib/python3.11/site-packages/lineax/_solve.py"
    text = f'loc(callsite("r"("{hook}":749:8) at "s"("{library}":20:4)))'
    assert parse_location(text) == SourceLocation(file=library, line=20)
    assert parse_location(f'loc("r"("{hook}":749:8))') is None
    frame = source_info_util.Frame(hook, "__call__", 749, 8, 749, 40)
    below = source_info_util.Frame(library, "linear_solve", 20, 4, 20, 30)
    assert jaxprs._census_frame([frame, below]) == f"{library}:20"
    assert jaxprs._census_frame([frame]) == ""
    user = "/home/u/test_solve.py"
    assert jaxprs._census_frame([frame, below, frame._replace(file_name=user)]) == f"{user}:749"


def test_a_kernel_with_only_library_frames_is_at_the_line_that_called_into_the_library() -> None:
    """A function JAX lowered apart (a library's jit or primitive) keeps locations that stop
    inside the library: its kernels are at its call site's user line, like the rest of the
    program's; ``own`` packages keep their lines; a user frame of its own always wins."""
    file = "/venv/lib/python3.11/site-packages/lib/solve.py"
    call = f'loc(callsite("t"("/src/test_a.py":9:1) at "r"("{file}":3:1)))'
    program = Program(
        entry="main",
        functions={
            "main": (
                OpSite(op="func.call", target="inner", location=call),
                OpSite(op="stablehlo.dot_general", location='loc("/src/test_a.py":8:1)'),
            ),
            "inner": (
                OpSite(op="stablehlo.dot_general", location=f'loc("{file}":40:2)'),
                OpSite(op="stablehlo.custom_call", target="cusolver_getrf_ffi",
                       location=f'loc(callsite("g"("{file}":41:2) at "u"("/src/mine.py":5:1)))'),
            ),
        },
    )  # fmt: skip
    locations = sorted(str(k.location) for k in take_census(program, "cuda").kernels)
    assert locations == ["/src/mine.py:5", "/src/test_a.py:8", "/src/test_a.py:9"]
    own = sorted(str(k.location) for k in take_census(program, "cuda", own=("lib",)).kernels)
    assert own == sorted(["/src/test_a.py:8", f"{file}:40", f"{file}:41"])  # the innermost
    inside, caller = f'loc("{file}":40:2)', SourceLocation(file="/src/test_a.py", line=9)
    assert placed_location(inside, caller) == caller
    assert placed_location(inside, None) == SourceLocation(file=file, line=40)  # nothing called
    assert placed_location(inside, caller, own=("lib",)) == SourceLocation(file=file, line=40)
    assert is_library_file(file)
    assert not is_library_file(file, own=("lib",))
    assert not is_library_file("/src/test_a.py")


def test_a_read_location_stops_at_the_first_user_frame(tmp_path) -> None:
    """An op's location is read as its call stack up to the first frame that is the user's
    code: the library frames inside it (where ``own_packages`` may place the op) and that
    frame, not the callers beyond it (pytest's), which no census looks at and which made each
    location's text several KB under a deep library stack."""
    folder = tmp_path / "venv" / "site-packages" / "stacklib"
    folder.mkdir(parents=True)
    source = folder / "__init__.py"
    source.write_text(
        "import jax.numpy as jnp\n"
        "def inner(x):\n"
        "    return jnp.dot(x, x)\n"
        "def outer(x):\n"
        "    return inner(x) + 1\n"
    )
    spec = importlib.util.spec_from_file_location("stacklib", source)
    stacklib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stacklib)

    def model(x):
        return stacklib.outer(x)  # the first user frame

    traced = tracing.trace(model, (jnp.ones((3, 3)),), {})
    line = model.__code__.co_firstlineno + 1
    for platform in ("cpu", "cuda"):
        program = stablehlo.read_program(lowering.lower(traced, platform))
        (dot,) = [s for s in program.functions[program.entry] if s.op == "stablehlo.dot_general"]
        frames = location_frames(dot.location)
        assert frames == [(str(source), "3"), (str(source), "5"), (__file__, str(line))]
    # On cuda the dot is cuBLAS's: at the user's line, or inside the library it owns
    kernels = take_census(program, "cuda").kernels
    assert [(k.library, str(k.location)) for k in kernels] == [("cublas", f"{__file__}:{line}")]
    kernels = take_census(program, "cuda", own=("stacklib",)).kernels
    assert [str(k.location) for k in kernels] == [f"{source}:3"]
    with jax.default_device(jax.devices("cpu")[0]):  # and the program still runs here
        assert float(jax.jit(model)(jnp.ones((3, 3)))[0, 0]) == 4.0


def test_read_program_groups_identical_ops_and_leaves_out_uncounted_ones() -> None:
    def f(x):
        return jnp.sin(x) + jnp.sin(x * 2) + jnp.sin(x * 3) + 1.0

    x = jnp.ones((4, 4))
    assert count_in_text(f, x, platform="cuda", needle="stablehlo.sine") == 3
    program = stablehlo.read_program(lowering.lower(tracing.trace(f, (x,), {}), "cuda"))
    sites = [site for sites in program.functions.values() for site in sites]
    [sine] = [site for site in sites if site.op == "stablehlo.sine"]
    assert sine.count == 3
    assert not {"stablehlo.constant", "func.return", "stablehlo.return"} & {s.op for s in sites}
    census = take_census(program, "cuda")
    assert census.xla_ops == sum(site.count for site in sites)


def test_a_site_with_a_count_weighs_like_that_many_sites() -> None:
    dot = OpSite(op="stablehlo.dot_general", location='loc("m.py":3:0)', flops=8.0, bytes=4.0)
    grouped = Program(entry="main", functions={"main": (replace(dot, count=3),)})
    spelled_out = Program(entry="main", functions={"main": (dot, dot, dot)})

    def seconds(site: OpSite, layer: str) -> float:
        return site.flops + site.bytes

    census = take_census(grouped, "cuda", seconds=seconds)
    assert census.libraries() == {"cublas": 3}
    assert census == take_census(spelled_out, "cuda", seconds=seconds)
    assert census.estimated_seconds == (("vendor", "cublas", 36.0),)


HMC_STEP = """
import jax.numpy as jnp
import pytest


def kinetic(momentum, inverse_mass):
    return 0.5 * jnp.dot(momentum, inverse_mass * momentum)


@pytest.mark.portable
def test_kinetic_energy(jaxport):
    jaxport.check(kinetic, jnp.ones(1), jnp.ones(1))


def project(w, x):
    return w @ x


@pytest.mark.portable
def test_projection(jaxport):
    jaxport.check(project, jnp.ones((64, 64)), jnp.ones((64, 8)))
"""


@pytest.mark.slow
def test_a_dot_of_two_vectors_is_no_cublas_call_nor_a_tf32_finding(
    pytester: pytest.Pytester,
) -> None:
    """Issue 50, item 7: numpyro's ``build_tree`` dots two ``tensor<1xf32>``; XLA's GPU
    compiler makes that a multiply and a reduce (a deviceless H100 compile has no gemm:
    tests/test_deviceless.py), so the lowered level counts it as XLA's on cuda and rocm,
    with no TF32 finding. The matrix product beside it is counted as before."""
    pytester.makefile(
        ".toml",
        pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n\n'
        "[tool.jaxport.budget.cuda]\nmax_vendor_calls = 0\n",
    )
    pytester.makepyfile(test_tree=HMC_STEP)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--jaxport-report=r.json", "--jaxport-report-details=all"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "    stablehlo.dot_general (cublas) at test_tree.py:15",
            "cuda            2         0       1       1       0       0  cublas 1",
            "rocm            2         0       1       1       0       0  hipblas 1",
            "FAILED test_tree.py::test_projection - cuda: 1 vendor call > 0*",
        ]
    )
    result.stdout.no_fnmatch_line("FAILED test_tree.py::test_kinetic_energy*")
    report = json.loads((pytester.path / "r.json").read_text())
    (kinetic,) = [t for t in report["tests"] if t["nodeid"].endswith("test_kinetic_energy")]
    platforms = kinetic["checks"][0]["platforms"]
    for platform in ("cuda", "rocm"):
        lowered = platforms[platform]["lowered"]
        assert lowered["vendor"] == 0, platform
        assert lowered["xla_kinds"].get("strength-reduced-dot") == 1, platform
    findings = {p: [f["rule"] for f in platforms[p]["lowered"]["formats"]["findings"]]
                for p in ("cuda", "tpu")}  # fmt: skip
    assert "float32-default-precision" not in findings["cuda"]
    assert "float32-default-precision" in findings["tpu"]  # the TPU is not XLA's GPU compiler


ZERO_SIZE_PROGRAMS = {
    # blackjax's low-rank mass matrix with a rank of 0: float32[2,0] @ float32[0] and the like
    "blackjax's U @ ((s-1) * (U.T @ y))": (
        lambda u, s, y: u @ ((s - 1) * (u.T @ y)),
        ((2, 0), (0,), (2,)),
    ),
    "empty product": (lambda a, b: a @ b, ((0, 8), (8, 4))),
    "empty convolution": (
        lambda x, w: jax.lax.conv(x, w, (1, 1), "SAME"),
        ((1, 0, 8, 8), (4, 0, 3, 3)),
    ),
    "empty fft": (lambda x: jnp.fft.fft(x), ((0, 8),)),
}


@pytest.mark.parametrize("case", sorted(ZERO_SIZE_PROGRAMS))
def test_a_product_of_nothing_is_no_library_call_lowered_or_compiled(case: str) -> None:
    """Issue 55, item 15: XLA replaces a dot or convolution with a zero-element operand by a
    broadcast zero (and an empty FFT by a constant) on every platform: the lowered census
    counts no gemm, convolution or FFT call for it, as the compiled CPU program has none."""
    fn, shapes = ZERO_SIZE_PROGRAMS[case]
    args = [jnp.ones(shape, jnp.complex64 if "fft" in case else jnp.float32) for shape in shapes]
    for platform in ("cpu", "cuda", "rocm", "tpu"):
        census = census_of(fn, *args, platform=platform)
        assert census.vendor == 0, (platform, census.kernels)
        assert census.xla_kinds.get("zero-size", 0) >= 1, platform
    compiled = jax.jit(fn).lower(*args).compile().as_text()
    cpu = take_census(parse_compiled_hlo(compiled), "cpu", level="compiled")
    assert cpu.vendor == 0, cpu.kernels


def test_a_suites_census_in_one_pass_is_the_sum_one_by_one() -> None:
    """An audited suite adds up every computation's census per platform (issue 55, item 18:
    3,048 on blackjax, each sum sorting every site again): ``plus`` in one pass gives what
    adding them one by one gives, sites, kinds and collectives."""
    x = jnp.ones((8, 8), jnp.float32)
    functions = [
        lambda a: a @ a,
        lambda a: jnp.linalg.eigh(a)[0],
        lambda a: jnp.linalg.solve(a, a) @ a,
        lambda a: jnp.sin(a).sum(),
        lambda a: jnp.linalg.eigh(a @ a)[1] @ a,
    ]
    censuses = [census_of(f, x, platform="cuda") for f in functions]
    one_by_one = censuses[0]
    for c in censuses[1:]:
        one_by_one = one_by_one + c
    together = censuses[0].plus(censuses[1:])
    assert together == one_by_one
    assert sum(k.count for k in together.kernels) == sum(
        k.count for c in censuses for k in c.kernels
    )
    assert together.xla_ops == sum(c.xla_ops for c in censuses)
    assert Census(platform="cuda").plus(censuses) == Census(platform="cuda") + one_by_one
