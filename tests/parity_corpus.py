"""The census-parity corpus: real programs whose census is recorded per JAX release.

``tests/data/census_parity.json`` holds, per case and platform, the census the floor release
gives and every change a later release brought, each with the release it was first seen on
and why (JAX's doing, listed in ``docs/compatibility.md``). ``tests/test_parity.py`` fails
when this JAX's census differs from the record without such an entry.

Record a release (run it with that release installed, oldest release first)::

    python tests/parity_corpus.py --record

It adds an entry for each census that differs, with an empty ``why``: the parity tests fail
until someone says why, next to it (and in ``docs/compatibility.md``).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
RECORD = TESTS / "data" / "census_parity.json"
DEMO_SRC = TESTS.parent / "examples" / "demo" / "src"
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


# -- the corpus ---------------------------------------------------------------------------------


def _kernels() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """Hand-written kernels, one per Pallas backend (Triton, Mosaic GPU, Mosaic TPU)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas import triton as pltriton

    def double(x_ref, o_ref):  # type: ignore[no-untyped-def]
        o_ref[...] = x_ref[...] * 2.0

    def pallas_call(params: Any) -> Callable[[jax.Array], jax.Array]:
        def call(x: jax.Array) -> jax.Array:
            out = jax.ShapeDtypeStruct(x.shape, x.dtype)
            return pl.pallas_call(double, out_shape=out, compiler_params=params)(x)

        return call

    # plgpu.kernel takes the output's type as `out_type` from jax 0.10 (`out_shape` before)
    out = "out_type" if "out_type" in inspect.signature(plgpu.kernel).parameters else "out_shape"

    def mosaic_gpu(x: jax.Array) -> jax.Array:
        return plgpu.kernel(double, **{out: jax.ShapeDtypeStruct(x.shape, x.dtype)})(x)

    x = jnp.ones((128, 128))
    return {
        "pallas_triton": (pallas_call(pltriton.CompilerParams()), (x,)),
        "pallas_mosaic_tpu": (pallas_call(pltpu.CompilerParams()), (x,)),
        "pallas_mosaic_gpu": (mosaic_gpu, (x,)),
    }


def _demo() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The demo's functions with the shapes its tests use, and the conv net's gradient."""
    import jax
    import jax.numpy as jnp

    if str(DEMO_SRC) not in sys.path:
        sys.path.insert(0, str(DEMO_SRC))
    import demo_models as dm

    key = jax.random.key
    params, images = dm.init_convnet(key(5)), jnp.zeros((4, 16, 16, 3))
    return {
        "demo_mlp": (dm.mlp, (dm.init_mlp(key(0)), jnp.zeros((16, 32)))),
        "demo_convnet": (dm.convnet, (params, images)),
        "demo_convnet_grad": (
            jax.grad(lambda p, i: dm.convnet(p, i).sum(), argnums=(0, 1)),
            (params, images),
        ),
        "demo_attention": (
            dm.multi_head_attention,
            (dm.init_attention(key(2)), jnp.zeros((2, 16, 32)), jnp.ones((16, 16), bool)),
        ),
        "demo_solve": (dm.solve, (jnp.eye(16), jnp.zeros((16, 4)))),
        "demo_ridge_lstsq": (dm.ridge_lstsq, (jnp.ones((64, 8)), jnp.zeros((64,)))),
        "demo_lowpass_filter": (dm.lowpass_filter, (jnp.zeros((4, 128)),)),
        "demo_fused_bias_gelu": (dm.fused_bias_gelu, (jnp.zeros((8, 128)), jnp.zeros((128,)))),
    }


@functools.cache
def corpus() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """Every case: the multi-platform equality corpus, Pallas kernels, the demo."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from test_lowering import CASES

    return {**CASES, **_kernels(), **_demo()}


# -- a census, as recorded ---------------------------------------------------------------------


def census_record(fn: Callable[..., Any], args: tuple[Any, ...], platform: str) -> dict[str, Any]:
    """What the plugin finds for ``fn(*args)`` on ``platform``, in the record's terms: counts
    per layer and library and every kernel by name, or why it did not lower."""
    from pytest_jaxport._jax import lowering, stablehlo, tracing
    from pytest_jaxport._jax.adapters import needs_hardware
    from pytest_jaxport.model.census import take_census

    try:
        with warnings.catch_warnings():  # JAX's own deprecations (Pallas Triton on 0.12)
            warnings.simplefilter("ignore", DeprecationWarning)
            program = stablehlo.read_program(lowering.lower(tracing.trace(fn, args, {}), platform))
        lowering.refuse_unrunnable(program, platform)
    except lowering.LoweringFailure as e:
        return {"error": "needs a GPU" if needs_hardware(str(e)) else "does not lower"}
    census = take_census(program, platform)
    kernels: dict[str, int] = {}
    for kernel in census.kernels:
        if kernel.layer != "xla":
            kernels[kernel.name] = kernels.get(kernel.name, 0) + kernel.count
    return {
        "vendor": census.vendor,
        "custom": census.custom,
        "meta": census.meta,
        "libraries": dict(sorted(census.libraries().items())),
        "kernels": dict(sorted(kernels.items())),
    }


def current(case: str) -> dict[str, dict[str, Any]]:
    fn, args = corpus()[case]
    return {platform: census_record(fn, args, platform) for platform in PLATFORMS}


# -- the record ---------------------------------------------------------------------------------


def release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORD.read_text())
    return data


def expected(record: dict[str, Any], case: str, platform: str, jax: str) -> tuple[Any, str]:
    """The recorded census of ``case`` on ``platform`` for release ``jax``, and since when."""
    entry = record["cases"][case][platform]
    found, since = entry["census"], record["floor"]
    for change in entry.get("changes", ()):
        if release(change["since"]) <= release(jax):
            found, since = change["census"], change["since"]
    return found, since


def changes(record: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for case, platforms in record["cases"].items():
        for platform, entry in platforms.items():
            for change in entry.get("changes", ()):
                yield case, platform, change


def record_this_release(record: dict[str, Any], jax: str) -> list[str]:
    """Add this release's differences to ``record`` (``why`` left empty); what was added."""
    added = []
    for case in corpus():
        for platform, found in current(case).items():
            entries = record["cases"].setdefault(case, {})
            if platform not in entries:  # a new case: record it on every release
                entries[platform] = {"census": found, "changes": []}
                added.append(f"{case}/{platform} (new)")
                continue
            if expected(record, case, platform, jax)[0] == found:
                continue
            entries[platform].setdefault("changes", []).append(
                {"since": jax, "census": found, "why": ""}
            )
            entries[platform]["changes"].sort(key=lambda c: release(c["since"]))
            added.append(f"{case}/{platform}")
    return added


def dump(record: dict[str, Any]) -> str:
    """The record as JSON with one line per census, so a change reads as one line of diff."""
    line = functools.partial(json.dumps, sort_keys=False)
    out = ["{", f' "floor": {line(record["floor"])},', f' "releases": {line(record["releases"])},']
    out.append(' "cases": {')
    cases = list(record["cases"].items())
    for i, (case, platforms) in enumerate(cases):
        out.append(f"  {line(case)}: {{")
        items = list(platforms.items())
        for j, (platform, entry) in enumerate(items):
            out.append(f"   {line(platform)}: {{")
            changes = entry.get("changes", [])
            out.append(f'    "census": {line(entry["census"])},')
            out.append('    "changes": [' + ("" if changes else "]"))
            for k, change in enumerate(changes):
                comma = "," if k + 1 < len(changes) else ""
                out.append(f"     {line(change)}{comma}")
            if changes:
                out.append("    ]")
            out.append("   }" + ("," if j + 1 < len(items) else ""))
        out.append("  }" + ("," if i + 1 < len(cases) else ""))
    out += [" }", "}", ""]
    return "\n".join(out)


def main() -> None:
    from pytest_jaxport._jax.adapters import jax_release

    if sys.argv[1:] != ["--record"]:
        raise SystemExit(__doc__)
    jax = jax_release()
    record = load() if RECORD.exists() else {"floor": jax, "releases": [], "cases": {}}
    added = record_this_release(record, jax)
    record["releases"] = sorted({*record["releases"], jax}, key=release)
    RECORD.write_text(dump(record))
    print(f"jax {jax}: {len(added)} recorded: {', '.join(added) or 'no change'}")


if __name__ == "__main__":
    main()
