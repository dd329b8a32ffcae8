"""libtpu's own "available HBM" per device, for each TPU generation it compiles for without a
TPU: the capacity a tpu memory plan is judged against (issue 56;
``pytest_jaxport/model/platforms.py``'s ``DeviceDescription.capacity_bytes``).

For each generation, in the chip configuration pytest-jaxport compiles for (``default``), on
the smallest slice:

1. an over-large program (``x + 1`` on a float32 vector of 128 GiB) is compiled deviceless, and
   libtpu's ``RESOURCE_EXHAUSTED`` text gives its figures: ``the total memory required ...
   (256.00G) exceeds available HBM (15.75G)``;
2. the boundary is then bracketed to the byte step of the program (``x + 1`` on ``f32[n ×
   1024]``: its planned peak, argument plus output, grows 8 KiB per step of ``n``) by
   bisection: the largest program that compiles and the smallest that does not, each with the
   compiler's planned peak (``peak_memory_in_bytes``) or its refusal.

libtpu refuses a program whose planned peak plus its code (``generated_code_size_in_bytes``)
is above its available HBM: on v5e the largest program that compiles has plan + code 7,168
bytes under the lent chip's ``bytes_limit`` (16,909,336,064), and the smallest refused one
"Exceeded hbm capacity by 1.0K": plan + code 1,024 bytes over it. So the capacity is the
smallest refused program's plan (8 bytes an element: argument and output) plus the code (the
largest fitting one's) less the excess libtpu prints, checked to lie within the bracket (plan
+ code of the largest fitting one, and of the smallest refused one). Run (JAX_PLATFORMS=cpu,
libtpu installed, under a minute per generation on 2 cores)::

    JAX_PLATFORMS=cpu python -m benchmarks.validation.tpu_capacity \\
        --out benchmarks/results/tpu-capacity-libtpu-0.0.42.1.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

GENERATIONS: tuple[tuple[str, str], ...] = (
    ("v2", "v2:1x1"),
    ("v3", "v3:1x1"),
    ("v4", "v4:1x1x1"),
    ("v5e", "v5e:1x1"),
    ("v5p", "v5p:1x1x1"),
    ("v6e", "v6e:1x1"),
    ("7x", "tpu7x:1x1x1"),
)
"""Each generation pytest-jaxport compiles for, and its smallest slice (libtpu's names)."""

STEP = 1024
"""Elements per step of ``n``: a float32 vector of ``n × 1024`` takes 4 KiB a step on every
generation's layout (``{0:T(1024)}``), argument and output 8 KiB."""

_EXCESS = re.compile(r"Exceeded hbm capacity by (?P<excess>[0-9.]+)(?P<unit>[KMG]?)")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_FIGURES = re.compile(
    r"\((?P<needs>[0-9.]+)G\)\s+exceeds\s+available\s+HBM\s+\((?P<avail>[0-9.]+)G\)"
)


def _topology(name: str) -> Any:
    from jax.experimental import topologies

    dims = name.split(":")[1].split("x")
    bounds = (*tuple(min(int(d), 2) for d in (*dims, "1", "1")[:2]), 1)
    return topologies.get_topology_desc(
        platform="tpu", topology_name=name, chip_config_name="default",
        chips_per_host_bounds=bounds, num_slices=1, wrap=(False, False, False),
    )  # fmt: skip


def _compile(device: Any, elements: int) -> dict[str, Any]:
    """``x + 1`` on ``f32[elements]``, compiled for ``device``: its planned peak, or libtpu's
    refusal."""
    import jax
    import jax.numpy as jnp

    spec = jax.ShapeDtypeStruct(
        (elements,), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(device)
    )
    started = time.perf_counter()
    try:
        compiled = jax.jit(lambda x: x + 1).lower(spec).compile()
    except Exception as error:  # the refusal is the measurement
        said = f"{type(error).__name__}: {error}".splitlines()[0]
        return {"elements": elements, "ok": False, "error": said[:400],
                "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip
    stats = compiled.memory_analysis()
    return {
        "elements": elements,
        "ok": True,
        "peak_bytes": int(stats.peak_memory_in_bytes),
        "argument_bytes": int(stats.argument_size_in_bytes),
        "output_bytes": int(stats.output_size_in_bytes),
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
        "seconds": round(time.perf_counter() - started, 2),
    }


def measure(generation: str, topology_name: str) -> dict[str, Any]:
    """One generation's available HBM: libtpu's figure and the bracket."""
    topology = _topology(topology_name)
    device = topology.devices[0]
    over = _compile(device, (128 << 30) // 4)
    found = _FIGURES.search(over.get("error", ""))
    entry: dict[str, Any] = {
        "generation": generation,
        "topology": topology_name,
        "device_kind": str(device.device_kind),
        "devices_in_slice": len(topology.devices),
        "over_large": over,
    }
    if found is None:
        entry["problem"] = "the over-large program was not refused with a figure"
        return entry
    available = float(found.group("avail")) * (1 << 30)
    entry["available_text"] = f"{found.group('avail')}G"
    # The plan is 8 KiB a step: bracket the boundary from 0.02 GiB below the figure to above.
    low = int((available - 0.02 * (1 << 30)) // (8 * STEP))
    high = int((available + 0.02 * (1 << 30)) // (8 * STEP)) + 1
    fits = _compile(device, low * STEP)
    refused = _compile(device, high * STEP)
    steps = [fits, refused]
    if not fits["ok"] or refused["ok"]:
        entry["problem"] = "the bracket's ends are not one fitting and one refused"
        entry["steps"] = steps
        return entry
    while high - low > 1:
        middle = (low + high) // 2
        found_middle = _compile(device, middle * STEP)
        steps.append(found_middle)
        if found_middle["ok"]:
            low, fits = middle, found_middle
        else:
            high, refused = middle, found_middle
    code = fits["generated_code_bytes"]
    bracket = (fits["peak_bytes"] + code, 8 * refused["elements"] + code)
    entry.update(
        largest_fitting=fits,
        smallest_refused=refused,
        step_bytes=8 * STEP,
        compiles=len(steps) + 1,
        bracket_plan_plus_code=list(bracket),
    )
    excess = _EXCESS.search(refused["error"])
    if excess is None:
        entry["problem"] = "the refusal names no excess"
        return entry
    over = round(float(excess.group("excess")) * _UNITS[excess.group("unit")])
    capacity = bracket[1] - over
    entry.update(excess_text=excess.group(0), capacity_bytes=capacity)
    if not bracket[0] <= capacity < bracket[1]:
        entry["problem"] = "the refusal's excess puts the capacity outside the bracket"
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--generations", default=",".join(g for g, _ in GENERATIONS))
    options = parser.parse_args(argv)
    import jax

    wanted = options.generations.split(",")
    results: dict[str, Any] = {
        "about": "libtpu's available HBM per device, deviceless: benchmarks/validation/"
        "tpu_capacity.py (its docstring says how)",
        "jax": jax.__version__,
        "libtpu": version("libtpu"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "generations": {},
    }
    for generation, topology_name in GENERATIONS:
        if generation not in wanted:
            continue
        started = time.perf_counter()
        entry = measure(generation, topology_name)
        entry["seconds"] = round(time.perf_counter() - started, 1)
        results["generations"][generation] = entry
        print(generation, entry.get("capacity_bytes"), entry.get("available_text"),
              entry.get("problem", ""), file=sys.stderr, flush=True)  # fmt: skip
        options.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
