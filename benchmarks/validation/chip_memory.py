"""Will it fit (issue 56): the TPU compiler's memory plan against what the chip used.

    python benchmarks/validation/chip_memory.py chip --out FILE [--compile-only NAMES]  # on the TPU host
    python benchmarks/validation/chip_memory.py deviceless --out FILE [--topology v5e:2x2]  # any machine, libtpu
    python benchmarks/validation/chip_memory.py compare --chip FILE [FILE...] --deviceless FILE --sharded FILE --out STEM
    python benchmarks/validation/chip_memory.py chip --out FILE --dry-run   # no TPU: the CPU, small shapes

The corpus (:data:`PROGRAMS`) holds float32 products of 8192², 24576², 40960² and three near
the chip's 15.75 GiB (36864², 37504², 37632²), MLP train steps (8 layers of 2048² at batch
1024; 8 of 8192² at batch 4096, with and without donated parameters; 24, 30 and 31 layers;
a bfloat16 one), attention with 16 heads of 128 over 8,192 and 16,384 tokens, and a
``lax.scan`` over 16 layers of 4096² with and without ``jax.checkpoint``.

- ``chip`` runs every program in a process of its own (the chip's counters start clean):
  its arguments made on the chip by a jitted init (nothing crosses from the host), then
  ``jax.jit(fn).lower(*args).compile()`` with every ``memory_analysis()`` field (or the
  compile error's full text), then the run; ``memory_stats()`` is read at the start, after the
  init, after the compile and after the run. ``--compile-only NAMES`` compiles those
  programs (the ones the deviceless plan says do not fit) in one process, and any that
  compiles after all gets a process of its own and is run.
- ``deviceless`` compiles the same programs here through libtpu for a ``v5e:1x1`` topology,
  with ``jax.ShapeDtypeStruct`` arguments (nothing allocated), each in a process of its own
  with its peak RSS (``resource.getrusage``). ``--topology v5e:2x2`` compiles the programs of
  :data:`SHARDED` with their arguments sharded over the 4 chips, beside the sharding's
  expected per-chip argument bytes.
- ``compare`` joins the three recordings: the fit verdicts, the plans chip against
  deviceless field by field, the plan (and the plan plus the generated code) against the
  chip's measured peak, and the per-chip plans of the sharded programs.

Every step writes its file after each program. ``--dry-run`` runs the same code on the CPU
at shapes 32 times smaller (``chip``: the CPU stands in, ``memory_stats`` is none there).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
SHRINK = 32
"""How much smaller every dimension is in ``--dry-run``."""
CHILD_TIMEOUT = 240
"""Seconds one program's process may take."""


# -- the programs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    """One program: ``fn(*args)`` for arguments of ``specs()`` (shapes and dtypes)."""

    name: str
    what: str
    fn: Callable[..., Any]
    specs: Callable[[int], tuple[Any, ...]]
    """The argument shapes (a pytree of ``(shape, dtype name)``) at a shrink factor."""
    donate: tuple[int, ...] = ()


def _dim(n: int, shrink: int) -> int:
    return max(8, n // shrink)


def product(a: Any, b: Any) -> Any:
    return a @ b


def _product_specs(n: int, dtype: str = "float32") -> Callable[[int], tuple[Any, ...]]:
    def specs(shrink: int) -> tuple[Any, ...]:
        m = _dim(n, shrink)
        return ((m, m), dtype), ((m, m), dtype)

    return specs


def mlp_step(params: Any, x: Any, y: Any) -> Any:
    """One SGD step of an MLP (relu between layers) on a squared error."""
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        return jnp.mean((h - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads), value


def _mlp_specs(
    layers: int, width: int, batch: int, dtype: str = "float32"
) -> Callable[[int], tuple[Any, ...]]:
    def specs(shrink: int) -> tuple[Any, ...]:
        d, b = _dim(width, shrink), _dim(batch, shrink)
        params = [(((d, d), dtype), ((d,), dtype)) for _ in range(layers)]
        return params, ((b, d), dtype), ((b, d), dtype)

    return specs


def attention(q: Any, k: Any, v: Any) -> Any:
    """Softmax attention per head, the (heads, tokens, tokens) logits materialized."""
    import jax
    import jax.numpy as jnp

    scores = jnp.einsum("htd,hsd->hts", q, k) * (1.0 / math.sqrt(q.shape[-1]))
    return jnp.einsum("hts,hsd->htd", jax.nn.softmax(scores, axis=-1), v)


def _attention_specs(
    tokens: int, heads: int = 16, dim: int = 128
) -> Callable[[int], tuple[Any, ...]]:
    def specs(shrink: int) -> tuple[Any, ...]:
        t = _dim(tokens, shrink)
        return tuple(((heads, t, dim), "float32") for _ in range(3))

    return specs


def scan_step(ws: Any, x: Any, *, remat: bool) -> Any:
    """One SGD step of ``h = tanh(h @ W_l)`` scanned over the stacked layers ``ws``."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def body(h: Any, w: Any) -> Any:
        return jnp.tanh(h @ w), None

    if remat:
        body = jax.checkpoint(body)

    def loss(w: Any) -> Any:
        h, _ = lax.scan(body, x, w)
        return jnp.mean(h**2)

    value, grads = jax.value_and_grad(loss)(ws)
    return ws - 1e-3 * grads, value


def _scan_specs(layers: int, width: int, batch: int) -> Callable[[int], tuple[Any, ...]]:
    def specs(shrink: int) -> tuple[Any, ...]:
        d, b = _dim(width, shrink), _dim(batch, shrink)
        return ((layers, d, d), "float32"), ((b, d), "float32")

    return specs


PROGRAMS: tuple[Program, ...] = (
    Program(name="product_f32_8192", what="(8192²) @ (8192²) float32", fn=product,
            specs=_product_specs(8192)),
    Program(name="product_f32_24576", what="(24576²) @ (24576²) float32", fn=product,
            specs=_product_specs(24576)),
    Program(name="product_f32_40960", what="(40960²) @ (40960²) float32 (does not fit)",
            fn=product, specs=_product_specs(40960)),
    Program(name="product_f32_36864", what="(36864²) @ (36864²) float32: 15.19 GiB of operands",
            fn=product, specs=_product_specs(36864)),
    Program(name="product_f32_37504", what="(37504²) @ (37504²) float32: 15.72 GiB, at the limit",
            fn=product, specs=_product_specs(37504)),
    Program(name="product_f32_37632", what="(37632²) @ (37632²) float32: 15.83 GiB, just over",
            fn=product, specs=_product_specs(37632)),
    Program(name="product_bf16_32768", what="(32768²) @ (32768²) bfloat16", fn=product,
            specs=_product_specs(32768, "bfloat16")),
    Program(name="mlp_8x2048_b1024", what="MLP train step, 8 layers of 2048², batch 1024",
            fn=mlp_step, specs=_mlp_specs(8, 2048, 1024)),
    Program(name="mlp_8x8192_b4096", what="MLP train step, 8 layers of 8192², batch 4096",
            fn=mlp_step, specs=_mlp_specs(8, 8192, 4096)),
    Program(name="mlp_8x8192_b4096_donated", what="the same, parameters donated",
            fn=mlp_step, specs=_mlp_specs(8, 8192, 4096), donate=(0,)),
    Program(name="mlp_24x8192_b4096", what="MLP train step, 24 layers of 8192², batch 4096",
            fn=mlp_step, specs=_mlp_specs(24, 8192, 4096)),
    Program(name="mlp_30x8192_b4096", what="MLP train step, 30 layers of 8192²: near the limit",
            fn=mlp_step, specs=_mlp_specs(30, 8192, 4096)),
    Program(name="mlp_31x8192_b4096", what="MLP train step, 31 layers of 8192²: just over",
            fn=mlp_step, specs=_mlp_specs(31, 8192, 4096)),
    Program(name="mlp_8x8192_b4096_bf16", what="MLP train step in bfloat16, 8 layers of 8192²",
            fn=mlp_step, specs=_mlp_specs(8, 8192, 4096, "bfloat16")),
    Program(name="attention_t8192", what="attention, 16 heads × 128, 8,192 tokens",
            fn=attention, specs=_attention_specs(8192)),
    Program(name="attention_t16384", what="attention, 16 heads × 128, 16,384 tokens (does not fit)",
            fn=attention, specs=_attention_specs(16384)),
    Program(name="scan_16x4096_b8192", what="lax.scan train step, 16 layers of 4096², batch 8192",
            fn=functools.partial(scan_step, remat=False), specs=_scan_specs(16, 4096, 8192)),
    Program(name="scan_16x4096_b8192_remat", what="the same with jax.checkpoint on the layer",
            fn=functools.partial(scan_step, remat=True), specs=_scan_specs(16, 4096, 8192)),
)  # fmt: skip
BY_NAME = {p.name: p for p in PROGRAMS}


@dataclass(frozen=True, slots=True, kw_only=True)
class Sharded:
    """A program compiled for a 4-chip slice, its arguments' partition specs over a 1-D mesh
    (``"x"``: split 4 ways; ``None``: replicated)."""

    name: str
    program: str
    what: str
    specs: Callable[[Any], tuple[Any, ...]]
    """The arguments' ``PartitionSpec``s, given the spec pytree of the program."""


def _mlp_data_parallel(specs: Any) -> Any:
    from jax.sharding import PartitionSpec as P

    params, _, _ = specs
    return [(P(), P()) for _ in params], P("x", None), P("x", None)


def _mlp_fully_sharded(specs: Any) -> Any:
    from jax.sharding import PartitionSpec as P

    params, _, _ = specs
    return [(P("x", None), P("x")) for _ in params], P("x", None), P("x", None)


def _rows(specs: Any) -> Any:
    from jax.sharding import PartitionSpec as P

    return P("x", None), P()


def _heads(specs: Any) -> Any:
    from jax.sharding import PartitionSpec as P

    return tuple(P("x", None, None) for _ in specs)


SHARDED: tuple[Sharded, ...] = (
    Sharded(name="product_f32_24576 rows", program="product_f32_24576", specs=_rows,
            what="left operand's rows over 4 chips, right operand replicated"),
    Sharded(name="product_f32_40960 rows", program="product_f32_40960", specs=_rows,
            what="the 40960² product that does not fit one chip, rows over 4"),
    Sharded(name="mlp_8x8192_b4096 data parallel", program="mlp_8x8192_b4096",
            specs=_mlp_data_parallel, what="batch over 4 chips, parameters replicated"),
    Sharded(name="mlp_24x8192_b4096 fully sharded", program="mlp_24x8192_b4096",
            specs=_mlp_fully_sharded, what="batch and every parameter over 4 chips"),
    Sharded(name="attention_t16384 heads", program="attention_t16384", specs=_heads,
            what="the 16,384-token attention, heads over 4 chips"),
)  # fmt: skip
SHARDED_BY_NAME = {s.name: s for s in SHARDED}


# -- one program in this process ---------------------------------------------------------------


def _is_spec(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], str)


def _tree_map_specs(fn: Callable[[Any], Any], tree: Any) -> Any:
    import jax

    return jax.tree_util.tree_map(fn, tree, is_leaf=_is_spec)


def memory_fields(compiled: Any) -> dict[str, Any]:
    """Every field ``memory_analysis()`` gives, by its name."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    found: dict[str, Any] = {}
    for name in dir(stats):
        if name.startswith("_"):
            continue
        value = getattr(stats, name)
        if isinstance(value, (int, float, str)):
            found[name] = value
    return found


def device_stats(device: Any) -> dict[str, Any] | None:
    with contextlib.suppress(Exception):
        stats = device.memory_stats()
        return None if stats is None else {k: int(v) for k, v in stats.items()}
    return None


def _rss_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


@functools.cache
def _filler() -> Any:
    """The jitted init, compiled once per shape and dtype (the seed is an argument)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def make(shape: tuple[int, ...], dtype: str, seed: Any) -> Any:
        i = lax.broadcasted_iota(jnp.float32, shape, 0)
        j = lax.broadcasted_iota(jnp.float32, shape, len(shape) - 1)
        return (jnp.sin(i * 0.7312 + j * 0.1193 + seed) * 0.05).astype(dtype)

    return jax.jit(make, static_argnums=(0, 1))


def _fill(shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    """An array made on the default device by a fused jitted init (no temporaries)."""
    import jax
    import numpy as np

    return jax.block_until_ready(_filler()(tuple(shape), dtype, np.float32(seed)))


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def run_on_device(program: Program, shrink: int, *, run: bool = True) -> dict[str, Any]:
    """Init, compile and run ``program`` on this process's default device, reading the
    device's memory counters between the steps."""
    import jax

    device = jax.devices()[0]
    found: dict[str, Any] = {"device": device.device_kind, "stats_start": device_stats(device)}
    specs = program.specs(shrink)
    counter = iter(range(10**6))
    started = time.perf_counter()
    args = _tree_map_specs(lambda s: _fill(s[0], s[1], next(counter)), specs) if run else None
    found["init_s"] = round(time.perf_counter() - started, 2)
    found["stats_after_init"] = device_stats(device)
    jitted = jax.jit(program.fn, donate_argnums=program.donate)
    started = time.perf_counter()
    try:
        if args is None:
            abstract = _tree_map_specs(lambda s: jax.ShapeDtypeStruct(s[0], s[1]), specs)
            compiled = jitted.lower(*abstract).compile()
        else:
            compiled = jitted.lower(*args).compile()
    except Exception as e:  # the measurement: the compiler's words, in full
        found["compile_s"] = round(time.perf_counter() - started, 2)
        found["compile_error"] = _error_text(e)
        return found
    found["compile_s"] = round(time.perf_counter() - started, 2)
    found["memory_analysis"] = memory_fields(compiled)
    found["stats_after_compile"] = device_stats(device)
    if args is None:
        return found
    started = time.perf_counter()
    try:
        jax.block_until_ready(compiled(*args))
    except Exception as e:  # a run that fails for memory is a measurement too
        found["run_error"] = _error_text(e)
    found["run_s"] = round(time.perf_counter() - started, 2)
    found["stats_after_run"] = device_stats(device)
    return found


def topology(name: str) -> Any:
    """libtpu's description of a v5e slice (one host), compiled for without a TPU."""
    from jax.experimental import topologies

    x, y = (int(n) for n in name.split(":")[1].split("x"))
    return topologies.get_topology_desc(platform="tpu", topology_name=name,
                                        chip_config_name="default",
                                        chips_per_host_bounds=(x, y, 1), num_slices=1,
                                        wrap=(False, False, False))  # fmt: skip


def _shard_bytes(shape: tuple[int, ...], dtype: str, sharding: Any) -> int:
    import numpy as np

    return int(np.prod(sharding.shard_shape(shape))) * np.dtype(_np_dtype(dtype)).itemsize


def _np_dtype(dtype: str) -> Any:
    import ml_dtypes
    import numpy as np

    return ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)


def compile_deviceless(program: Program, shrink: int, topology_name: str,
                       sharded: Sharded | None) -> dict[str, Any]:  # fmt: skip
    """``program`` compiled through libtpu for ``topology_name`` from abstract arguments."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding

    found: dict[str, Any] = {"rss_start_kib": _rss_kib()}
    topo = topology(topology_name)
    found["rss_after_topology_kib"] = _rss_kib()
    specs = program.specs(shrink)
    if sharded is None:
        single = SingleDeviceSharding(topo.devices[0])
        shardings = _tree_map_specs(lambda s: single, specs)
    else:
        mesh = Mesh(np.array(topo.devices), ("x",))
        partition = sharded.specs(specs)
        shardings = jax.tree_util.tree_map(
            lambda s, p: NamedSharding(mesh, p), specs, partition, is_leaf=_is_spec
        )
        found["expected_argument_bytes_per_chip"] = sum(
            _shard_bytes(s[0], s[1], sh)
            for s, sh in zip(jax.tree_util.tree_leaves(specs, is_leaf=_is_spec),
                             jax.tree_util.tree_leaves(shardings), strict=True)
        )  # fmt: skip
    found["argument_bytes_unsharded"] = sum(
        int(np.prod(s[0])) * np.dtype(_np_dtype(s[1])).itemsize
        for s in jax.tree_util.tree_leaves(specs, is_leaf=_is_spec)
    )
    abstract = jax.tree_util.tree_map(
        lambda s, sh: jax.ShapeDtypeStruct(s[0], s[1], sharding=sh), specs, shardings,
        is_leaf=_is_spec,
    )  # fmt: skip
    started = time.perf_counter()
    try:
        compiled = jax.jit(program.fn, donate_argnums=program.donate).lower(*abstract).compile()
    except Exception as e:  # the measurement: the compiler's words, in full
        found["compile_error"] = _error_text(e)
    else:
        found["memory_analysis"] = memory_fields(compiled)
        text = compiled.as_text()
        found["collectives"] = sorted({c for c in ("all-reduce", "all-gather", "reduce-scatter",
                                                   "collective-permute", "all-to-all")
                                       if f" {c}" in text or f"{c}-start" in text})  # fmt: skip
    found["compile_s"] = round(time.perf_counter() - started, 2)
    found["rss_end_kib"] = _rss_kib()
    return found


# -- the steps: a process per program ------------------------------------------------------------


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def facts(where: str) -> dict[str, Any]:
    import importlib.metadata as metadata

    import jax

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    device = jax.devices()[0]
    return {"where": where, "jax": jax.__version__, "jaxlib": version("jaxlib"),
            "libtpu": version("libtpu"), "python": sys.version.split()[0],
            "date": dt.date.today().isoformat(), "default_device": device.device_kind,
            "platform": device.platform, "cpus": os.cpu_count()}  # fmt: skip


def _child(argv: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One step of this script in a process of its own: its JSON on the last stdout line."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT, env=None if env is None else dict(env))  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"process_error": f"no answer within {CHILD_TIMEOUT} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"process_error": f"exit {done.returncode}", "stderr_tail": done.stderr[-3000:],
                "wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip
    found: dict[str, Any] = json.loads(lines[-1])
    found["process_wall_s"] = round(time.perf_counter() - started, 1)
    return found


def _save(path: Path, results: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")


def step_chip(out: Path, *, dry_run: bool, compile_only: Sequence[str], names: Sequence[str],
              deadline: float) -> int:  # fmt: skip
    """Every program in a process of its own on the chip (the CPU in a dry run)."""
    started = time.monotonic()
    shrink = ["--dry-run"] if dry_run else []
    results: dict[str, Any] = {"facts": None, "script": "benchmarks/validation/chip_memory.py",
                               "shrink": SHRINK if dry_run else 1, "programs": {}}  # fmt: skip
    wanted = [p.name for p in PROGRAMS if not names or p.name in names]
    wanted.sort(key=lambda n: n.startswith("mlp_"))  # the slow compiles last
    grouped = [n for n in wanted if n in compile_only]
    if grouped:
        log(f"chip: compile only, in one process: {', '.join(grouped)}")
        group = _child(["one", "--where", "chip", "--compile-only", "yes", "--programs",
                        ",".join(grouped), *shrink])  # fmt: skip
        results["facts"] = results["facts"] or group.pop("facts", None)
        for name in grouped:
            entry = group.get(name, group)
            if "memory_analysis" in entry:  # it fits after all: measured in its own process
                log(f"chip: {name} compiled: run in its own process")
                continue
            results["programs"][name] = {**entry, "process": "compile-only group"}
        _save(out, results)
    for name in wanted:
        if name in results["programs"]:
            continue
        if time.monotonic() - started > deadline:
            results["programs"][name] = {"process_error": "not run: past the deadline"}
            continue
        found = _child(["one", "--where", "chip", "--programs", name, *shrink])
        if "process_error" in found and "no answer" not in found["process_error"]:
            log(f"chip: {name}: {_brief(found)}; again in 5 s")  # the chip may still be held
            time.sleep(5)
            found = {**_child(["one", "--where", "chip", "--programs", name, *shrink]),
                     "first_try": found}  # fmt: skip
        results["facts"] = results["facts"] or found.pop("facts", None)
        results["programs"][name] = found.get(name, found)
        log(f"chip: {name}: {_brief(results['programs'][name])}")
        _save(out, results)
    results["seconds"] = round(time.monotonic() - started, 1)
    _save(out, results)
    return 0


def _brief(entry: Mapping[str, Any]) -> str:
    if "compile_error" in entry:
        return entry["compile_error"].splitlines()[0][:200]
    if "process_error" in entry:
        return f"{entry['process_error']} {entry.get('stderr_tail', '')[-300:]}"
    plan = entry.get("memory_analysis", {}).get("peak_memory_in_bytes")
    peak = (entry.get("stats_after_run") or {}).get("peak_bytes_in_use")
    rss = entry.get("rss_end_kib")
    return (f"plan {plan / GIB if plan else float('nan'):.3f} GiB"
            + (f", chip peak {peak / GIB:.3f} GiB" if peak else "")
            + (f", rss {rss / 1024:.0f} MiB" if rss else "")
            + (f", run error {entry['run_error'][:200]}" if "run_error" in entry else ""))  # fmt: skip


def deviceless_env(topology_name: str) -> dict[str, str]:
    chips = math.prod(int(n) for n in topology_name.split(":")[1].split("x"))
    return {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
            "TPU_ACCELERATOR_TYPE": f"v5litepod-{chips}", "TPU_WORKER_HOSTNAMES": "localhost"}  # fmt: skip


def step_deviceless(out: Path, *, dry_run: bool, topology_name: str, names: Sequence[str]) -> int:
    """Every program (or every sharded one) compiled deviceless, a process each."""
    started = time.monotonic()
    env = deviceless_env(topology_name)
    shrink = ["--dry-run"] if dry_run else []
    results: dict[str, Any] = {
        "facts": _child(["facts", "--where", f"deviceless {topology_name}", *shrink], env),
        "script": "benchmarks/validation/chip_memory.py", "topology": topology_name,
        "shrink": SHRINK if dry_run else 1, "programs": {},
    }  # fmt: skip
    if topology_name == "v5e:1x1":
        wanted = [p.name for p in PROGRAMS if not names or p.name in names]
    else:
        wanted = [s.name for s in SHARDED if not names or s.name in names]
    for name in wanted:
        found = _child(["one", "--where", topology_name, "--programs", name, *shrink], env)
        results["programs"][name] = found.get(name, found)
        log(f"deviceless {topology_name}: {name}: {_brief(results['programs'][name])}")
        _save(out, results)
    results["seconds"] = round(time.monotonic() - started, 1)
    _save(out, results)
    return 0


def step_one(names: Sequence[str], *, where: str, dry_run: bool, compile_only: bool) -> int:
    """The programs ``names`` in this process; their JSON on one stdout line."""
    shrink = SHRINK if dry_run else 1
    found: dict[str, Any] = {}
    for name in names:
        try:
            if where == "chip":
                found[name] = run_on_device(BY_NAME[name], shrink, run=not compile_only)
            else:
                sharded = SHARDED_BY_NAME.get(name)
                program = BY_NAME[sharded.program if sharded else name]
                found[name] = compile_deviceless(program, shrink, where, sharded)
        except Exception as e:  # recorded, never the end of the step
            found[name] = {"process_error": _error_text(e)[:3000]}
        found[name]["rss_end_kib"] = _rss_kib()
    if where == "chip":  # the chip's own facts, from a process that holds it anyway
        found["facts"] = facts(where)
    print(json.dumps(found), flush=True)
    return 0


# -- the comparison (here, from the recordings) --------------------------------------------------


def _plan(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return entry.get("memory_analysis")


def chip_measured(chip: Mapping[str, Any]) -> bool:
    """Whether the chip compiled the program (or refused it): a recording, not a skip."""
    return "memory_analysis" in chip or "compile_error" in chip


def compare_one(
    name: str, chip: Mapping[str, Any], deviceless: Mapping[str, Any]
) -> dict[str, Any]:
    """One program: the fit verdicts, the plans and the chip's measured peak.

    The chip's ``memory_stats()`` count the program's temporaries apart: they are reserved
    for the run (``peak_bytes_reserved``), not allocated (``peak_bytes_in_use`` holds the
    arguments and outputs). The chip's peak is therefore taken as the rise of
    ``peak_bytes_in_use`` over the start plus ``peak_bytes_reserved``."""
    chip_plan, plan = _plan(chip), _plan(deviceless)
    row: dict[str, Any] = {
        "what": BY_NAME[name].what,
        "chip_measured": chip_measured(chip),
        "fits_deviceless": plan is not None,
        "fits_chip": chip_plan is not None if chip_measured(chip) else None,
        "ran_on_chip": chip_plan is not None and "run_error" not in chip and "stats_after_run" in chip,
        "deviceless_compile_s": deviceless.get("compile_s"),
        "deviceless_rss_mib": round(deviceless.get("rss_end_kib", 0) / 1024, 1),
    }  # fmt: skip
    if not row["chip_measured"]:
        row["chip_not_measured"] = chip.get("process_error", "not in the chip's recording")
    row["verdicts_agree"] = (
        row["fits_deviceless"] == row["fits_chip"] if row["chip_measured"] else None
    )
    if "compile_error" in deviceless or "compile_error" in chip:
        row["deviceless_error"] = deviceless.get("compile_error", "")[:600]
        row["chip_error"] = chip.get("compile_error", "")[:600]
        row["errors_same_text"] = deviceless.get("compile_error") == chip.get("compile_error")
    if "run_error" in chip:
        row["chip_run_error"] = chip["run_error"][:600]
    if plan is None or chip_plan is None:
        return row
    keys = sorted(set(plan) | set(chip_plan))
    row["plan_fields_differ"] = [k for k in keys if plan.get(k) != chip_plan.get(k)]
    peak, code = int(plan["peak_memory_in_bytes"]), int(plan["generated_code_size_in_bytes"])
    row["planned_peak_bytes"], row["generated_code_bytes"] = peak, code
    row["planned_temp_bytes"] = int(plan["temp_size_in_bytes"])
    start, after = chip.get("stats_start") or {}, chip.get("stats_after_run") or {}
    if "peak_bytes_in_use" not in after:
        return row
    in_use = int(after["peak_bytes_in_use"]) - int(start.get("bytes_in_use", 0))
    reserved = int(after.get("peak_bytes_reserved", 0))
    total = in_use + reserved
    row.update(
        chip_peak_in_use_rise_bytes=in_use,
        chip_peak_reserved_bytes=reserved,
        chip_peak_bytes=total,
        chip_peak_after_init_bytes=(chip.get("stats_after_init") or {}).get("peak_bytes_in_use"),
        chip_bytes_limit=after.get("bytes_limit"),
        plan_minus_chip_bytes=peak - total,
        plan_plus_code_minus_chip_bytes=peak + code - total,
        plan_at_or_above_chip=peak >= total,
        plan_plus_code_at_or_above_chip=peak + code >= total,
        plan_minus_in_use_rise_bytes=peak - in_use,
    )
    return row


def compare_sharded(
    name: str, entry: Mapping[str, Any], single: Mapping[str, Any]
) -> dict[str, Any]:
    """A sharded program's per-chip plan against its one-chip plan and the sharding."""
    plan, one = _plan(entry), _plan(single)
    row: dict[str, Any] = {"what": SHARDED_BY_NAME[name].what,
                           "fits_per_chip": plan is not None, "fits_one_chip": one is not None,
                           "collectives": entry.get("collectives"),
                           "compile_s": entry.get("compile_s"),
                           "rss_mib": round(entry.get("rss_end_kib", 0) / 1024, 1)}  # fmt: skip
    expected = entry.get("expected_argument_bytes_per_chip")
    row["expected_argument_bytes_per_chip"] = expected
    row["argument_bytes_unsharded"] = entry.get("argument_bytes_unsharded")
    if plan is None:
        row["error"] = entry.get("compile_error", entry.get("process_error", ""))[:600]
        return row
    row["argument_bytes_per_chip"] = plan["argument_size_in_bytes"]
    row["arguments_as_the_sharding_says"] = plan["argument_size_in_bytes"] == expected
    row["planned_peak_per_chip_bytes"] = plan["peak_memory_in_bytes"]
    for key in ("output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes"):
        row[f"{key[:-9]}_per_chip_bytes"] = plan[key]
    if one is not None:
        row["one_chip_planned_peak_bytes"] = one["peak_memory_in_bytes"]
        row["peak_ratio_one_chip_over_per_chip"] = round(
            one["peak_memory_in_bytes"] / plan["peak_memory_in_bytes"], 3
        )
    return row


def merged_chip(paths: Sequence[Path]) -> dict[str, Any]:
    """The chip's recordings, a later one filling in the programs an earlier one did not
    measure (a session that ran out of device time, say); each program says its file."""
    merged: dict[str, Any] = {"facts": None, "programs": {}, "files": [str(p) for p in paths]}
    for path in paths:
        found = json.loads(path.read_text())
        merged["facts"] = merged["facts"] or found.get("facts")
        for name, entry in found["programs"].items():
            if chip_measured(entry) or name not in merged["programs"]:
                merged["programs"][name] = {**entry, "recording": path.name}
    return merged


def step_compare(chip_paths: Sequence[Path], deviceless_path: Path, sharded_path: Path | None,
                 out_stem: Path) -> int:  # fmt: skip
    chip, deviceless = merged_chip(chip_paths), json.loads(deviceless_path.read_text())
    rows = {name: compare_one(name, chip["programs"].get(name, {}), entry)
            for name, entry in deviceless["programs"].items()}  # fmt: skip
    measured = {n: r for n, r in rows.items() if "chip_peak_bytes" in r}
    judged = [r for r in rows.values() if r["chip_measured"]]
    margins = [r["plan_plus_code_minus_chip_bytes"] for r in measured.values()]
    summary = {
        "programs": len(rows),
        "chip_measured": len(judged),
        "verdicts_agree": sum(bool(r["verdicts_agree"]) for r in judged),
        "not_measured_on_chip": [n for n, r in rows.items() if not r["chip_measured"]],
        "compile_errors_same_text": sum(bool(r.get("errors_same_text")) for r in judged
                                        if r.get("deviceless_error")),
        "compile_errors": sum(bool(r.get("deviceless_error")) for r in judged),
        "plans_equal_chip_and_deviceless": sum(
            not r["plan_fields_differ"] for r in rows.values() if "plan_fields_differ" in r),
        "compiled_both": sum("plan_fields_differ" in r for r in rows.values()),
        "measured_on_chip": len(measured),
        "plan_below_chip_peak": [n for n, r in measured.items() if not r["plan_at_or_above_chip"]],
        "plan_plus_code_below_chip_peak": [n for n, r in measured.items()
                                           if not r["plan_plus_code_at_or_above_chip"]],
        "plan_plus_code_minus_chip_bytes": [min(margins), max(margins)] if margins else None,
        "plan_below_in_use_rise_only": [n for n, r in measured.items()
                                        if r["plan_minus_in_use_rise_bytes"] < 0],
        "compiled_but_failed_to_run": [n for n, r in rows.items()
                                       if r["fits_chip"] and not r["ran_on_chip"]],
        "largest_deviceless_rss_mib": max((r["deviceless_rss_mib"] for r in rows.values()),
                                          default=None),
        "deviceless_rss_mib_of_product_f32_40960": rows.get("product_f32_40960", {}).get(
            "deviceless_rss_mib"),
    }  # fmt: skip
    results: dict[str, Any] = {
        "about": "The TPU compiler's memory plan (deviceless, libtpu, v5e) against the lent TPU "
                 "v5e's own compile and measured memory: benchmarks/validation/chip_memory.py",
        "chip_facts": chip.get("facts"), "deviceless_facts": deviceless.get("facts"),
        "summary": summary, "programs": rows,
        "recorded": {"chip": chip, "deviceless": deviceless},
    }  # fmt: skip
    if sharded_path is not None:
        sharded = json.loads(sharded_path.read_text())
        results["sharded"] = {
            name: compare_sharded(name, entry,
                                  deviceless["programs"].get(SHARDED_BY_NAME[name].program, {}))
            for name, entry in sharded["programs"].items()
        }  # fmt: skip
        results["recorded"]["sharded"] = sharded
    _save(out_stem.with_suffix(".json"), results)
    out_stem.with_suffix(".md").write_text(markdown(results))
    log(f"compare: {json.dumps(summary)}")
    return 0


def _gib(value: Any) -> str:
    return "" if value is None else f"{value / GIB:.3f}"


def _fit(value: bool | None) -> str:
    return "not measured" if value is None else ("yes" if value else "no")


def markdown(results: Mapping[str, Any]) -> str:
    s = results["summary"]
    chip = results.get("chip_facts") or {}
    margins = s["plan_plus_code_minus_chip_bytes"]
    lines = [
        "# Will it fit: the TPU compiler's plan against the chip",
        "",
        f"Chip: {chip.get('default_device')} (jax {chip.get('jax')}, libtpu {chip.get('libtpu')}, "
        f"{chip.get('date')}); deviceless: libtpu for v5e:1x1 on the CPU machine. "
        "Script: `benchmarks/validation/chip_memory.py`. The chip's peak is the rise of "
        "`peak_bytes_in_use` (arguments, outputs) plus `peak_bytes_reserved` (the program's "
        "temporaries, reserved for the run and not counted in use).",
        "",
        f"- Fit verdicts agree chip vs deviceless: {s['verdicts_agree']} of {s['chip_measured']} "
        f"measured on the chip (not measured there: "
        + ("; ".join(f"{n} ({results['programs'][n]['chip_not_measured']})" for n in s["not_measured_on_chip"])
           or "none") + "); "
        f"the out-of-memory errors' text identical: {s['compile_errors_same_text']} of {s['compile_errors']}.",
        f"- memory_analysis equal field by field, chip vs deviceless: "
        f"{s['plans_equal_chip_and_deviceless']} of {s['compiled_both']} that compiled on both.",
        f"- Planned peak below the chip's peak: {', '.join(s['plan_below_chip_peak']) or 'none'}; "
        f"plan + generated code below it: {', '.join(s['plan_plus_code_below_chip_peak']) or 'none'} "
        f"({s['measured_on_chip']} run); plan + code − chip from "
        + (f"{margins[0] / 2**20:.3f} to {margins[1] / 2**20:.1f} MiB." if margins else "—"),
        f"- Compiled on the chip but failed to run: {', '.join(s['compiled_but_failed_to_run']) or 'none'}.",
        f"- Peak RSS of the deviceless compile: {s['deviceless_rss_mib_of_product_f32_40960']} MiB for "
        f"the 40960² product, {s['largest_deviceless_rss_mib']} MiB the largest.",
        "",
        "| program | fits (deviceless / chip) | planned peak GiB | temp GiB | code MiB "
        "| chip in use GiB | chip reserved GiB | plan + code − chip MiB | deviceless s | RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, r in results["programs"].items():
        fits = f"{_fit(r['fits_deviceless'])} / {_fit(r['fits_chip'])}"
        if r["fits_chip"] and not r["ran_on_chip"]:
            fits += " (run failed)"
        margin = r.get("plan_plus_code_minus_chip_bytes")
        code = r.get("generated_code_bytes")
        lines.append(
            f"| {name} | {fits} | {_gib(r.get('planned_peak_bytes'))} | "
            f"{_gib(r.get('planned_temp_bytes'))} | "
            f"{'' if code is None else f'{code / 2**20:.2f}'} | "
            f"{_gib(r.get('chip_peak_in_use_rise_bytes'))} | {_gib(r.get('chip_peak_reserved_bytes'))} | "
            f"{'' if margin is None else f'{margin / 2**20:.3f}'} | "
            f"{r['deviceless_compile_s']} | {r['deviceless_rss_mib']} |"
        )  # fmt: skip
    errors = [(n, r) for n, r in results["programs"].items() if r.get("deviceless_error")]
    if errors:
        lines += ["", "Compile errors (first line, deviceless):", ""]
        lines += [f"- {n}: `{r['deviceless_error'].splitlines()[0][:300]}`" for n, r in errors]
    if "sharded" in results:
        lines += ["", "## Sharded over v5e:2x2 (deviceless, per chip)", "",
                  "| program | fits per chip | arguments per chip GiB (the sharding says) "
                  "| planned peak per chip GiB | one chip's GiB | collectives |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for name, r in results["sharded"].items():
            lines.append(
                f"| {name} | {'yes' if r['fits_per_chip'] else 'no'} | "
                f"{_gib(r.get('argument_bytes_per_chip'))} ({_gib(r.get('expected_argument_bytes_per_chip'))}) | "
                f"{_gib(r.get('planned_peak_per_chip_bytes'))} | "
                f"{_gib(r.get('one_chip_planned_peak_bytes'))} | {', '.join(r.get('collectives') or [])} |"
            )
    return "\n".join(lines) + "\n"


# -- the command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("chip", "deviceless", "compare", "one", "facts"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="the CPU, shapes 32x smaller")
    parser.add_argument("--programs", default="", help="comma-separated names (default: all)")
    parser.add_argument("--compile-only", default="", help="chip: compile these in one process")
    parser.add_argument("--topology", default="v5e:1x1")
    parser.add_argument("--where", default="chip", help="one/facts: chip or a topology")
    parser.add_argument("--deadline", type=float, default=480.0, help="chip: seconds")
    parser.add_argument("--chip", type=Path, nargs="+", help="compare: the chip's recordings")
    parser.add_argument("--deviceless", type=Path)
    parser.add_argument("--sharded", type=Path)
    args = parser.parse_args(argv)
    names = [n for n in args.programs.split(",") if n]
    if args.dry_run and args.step in ("chip", "one", "facts") and args.where == "chip":
        os.environ["JAX_PLATFORMS"] = "cpu"
    if args.step == "facts":
        print(json.dumps(facts(args.where)), flush=True)
        return 0
    if args.step == "one":
        compile_only = bool(args.compile_only)
        return step_one(names, where=args.where, dry_run=args.dry_run, compile_only=compile_only)
    if args.step == "chip":
        compile_only = [n for n in args.compile_only.split(",") if n]
        return step_chip(args.out, dry_run=args.dry_run, compile_only=compile_only, names=names,
                         deadline=args.deadline)  # fmt: skip
    if args.step == "deviceless":
        return step_deviceless(args.out, dry_run=args.dry_run, topology_name=args.topology,
                               names=names)  # fmt: skip
    return step_compare(args.chip, args.deviceless, args.sharded, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
