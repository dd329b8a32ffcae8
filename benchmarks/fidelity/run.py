"""Prediction fidelity: how right pytest-jaxport's counts and runtime share are, measured.

    python -m benchmarks.fidelity.run [--out benchmarks/results/fidelity-<name>.json]

One command, on whatever machine it runs. For every program of the corpus
(``fidelity_corpus.py``: 18 programs, two sizes, forward and gradient) it runs the plugin's
own check (``fixture.Jaxport.check``: lowered census per platform, compiled census for cpu
and cuda, numerics) and records:

1. **counts**: per platform, the lowered census against the compiled census, per library
   (agreement in percent, each disagreement with its cause); on a machine with an NVIDIA
   GPU also the deviceless compiled census (the shipped description) against the census
   compiled on the GPU itself;
2. **runtime share**: on every platform present, the share the plugin would *estimate*
   (from the compiled program, and from the lowered one) against the share it *measures*
   with the profiler, in percentage points, next to the estimate before this change (a
   roofline over lowered ops, no launch costs) and the measurement's own repeatability;
3. **numerics**: each platform that ran against the reference (cpu), error and tolerance;
4. on a GPU, ``jaxport capture-target``'s description against the shipped one.

What is not possible here is recorded with the reason (no GPU: the real-GPU columns say so;
no CUDA plugin: the deviceless column says how to install it). Results: JSON, and the same
tables as Markdown next to it (``--md``; ``benchmarks/README.md`` shows them).

Other modes:

- ``--training FILE``: also write the measured programs the calibration fits on
  (``calibration/calibrate.py fit FILE`` refits ``pytest_jaxport/calibration.json``; the
  fit is calibration, not measurement, and lives there).
- ``--agreement-check FILE``: counts only (no timing, no execution needed beyond what the
  check does): exit 1 when lowered-vs-compiled agreement on the corpus is lower than the
  baseline ``FILE`` records (``--update-baseline`` writes it). Timing never fails it.

Run it with the interpreter that has pytest-jaxport (and, for the cuda columns without a GPU,
``jax-cuda12-plugin``/``jax-cuda12-pjrt`` at the jaxlib version, with ``JAX_PLATFORMS=cpu``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform as platform_module
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from benchmarks import REPO, RESULTS
from benchmarks.corpora import fidelity_corpus as corpus

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
COMPARED = ("cpu", "cuda", "tpu")
"""Platforms whose lowered census is compared with a compiled one (rocm does not compile
without its hardware; cuda needs the CUDA plugin, tpu libtpu)."""

OLD_PEAKS = {
    "cpu": (1e12, 100e9),
    "cuda": (67e12, 3.35e12),
    "rocm": (163.4e12, 5.3e12),
    "tpu": (459e12, 2.765e12),
}
"""The estimator before issue 16: a roofline of every lowered op against these (flops,
bandwidth), with no launch or library costs and no fusion (kept here to measure it)."""

Failed: type[BaseException] = Exception
"""``pytest.fail``'s exception (``jaxport.check`` reports usage errors with it)."""

CPU_LIBRARY_OPS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})
"""Lowered ops XLA:CPU compiles into YNNPACK, Eigen or oneDNN calls."""

SHIPPED_FOR_KIND = {"A100": "a100", "H100": "h100", "H200": "h200"}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _tpu_compiler() -> tuple[str | None, Any]:
    """libtpu's worker where the installed pair compiles for tpu, or why not (as
    ``compile = ["tpu"]`` judges it: pinned or measured, else probed)."""
    from pytest_jaxport._jax import libtpu

    verdict = libtpu.installed_verdict()
    problem = verdict.problem
    if problem is None and verdict.probe:
        problem = libtpu.probe()
    if problem is not None:
        return problem, None
    return None, libtpu.TpuCompiler(time_limit=600)


# -- the census comparison (pure) ------------------------------------------------------------


def library_counts(census: Any) -> dict[str, int]:
    """Vendor dispatches per library, plus hand-written kernels as ``custom``."""
    counts = dict(census.libraries())
    if census.custom:
        counts["custom"] = census.custom
    return counts


def agreement(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, float]:
    """Per library, ``min / max`` of the two counts in percent (100 when both are 0)."""
    return {
        library: 100.0
        * min(a.get(library, 0), b.get(library, 0))
        / max(a.get(library, 0), b.get(library, 0))
        for library in sorted(set(a) | set(b))
    }


def overall(pairs: Iterable[tuple[Mapping[str, int], Mapping[str, int]]]) -> float | None:
    """Dispatch-weighted agreement over many programs: Σ min / Σ max over every library."""
    low = high = 0
    for a, b in pairs:
        for library in set(a) | set(b):
            low += min(a.get(library, 0), b.get(library, 0))
            high += max(a.get(library, 0), b.get(library, 0))
    return 100.0 if high == 0 and low == 0 else (100.0 * low / high if high else None)


def lowered_vs_compiled_causes(platform: str, lowered: Any, compiled: Any) -> list[str]:
    """Why a compiled census differs from the lowered level's prediction, per library."""
    a, b = library_counts(lowered), library_counts(compiled)
    causes = []
    triton = compiled.xla_kinds.get("triton-gemm", 0)
    picked = [
        f"{library} {b[library]}"
        for library in sorted(set(b) - set(a))
        if platform == "cpu" and library in ("ynnpack", "eigen", "onednn")
    ]
    if picked:
        causes.append(
            f"{', '.join(picked)}: XLA:CPU picks these libraries for dots, convolutions and "
            "some reductions when it compiles (the lowered level counts them as xla on cpu)"
        )
    for library in sorted(set(a) | set(b)):
        before, after = a.get(library, 0), b.get(library, 0)
        if before == after or (before == 0 and any(p.startswith(f"{library} ") for p in picked)):
            continue
        if library in ("cublas", "hipblas", "hipblaslt") and after < before and triton:
            causes.append(
                f"{library} {before} -> {after}: XLA generated {triton} gemm(s) itself as "
                "Triton gemm fusions (xla layer)"
                + ("; the rest fused or rewritten" if before - after > triton else "")
            )
        elif library == "cudnn" and any(
            k.library == "cudnn" and k.kind == "fusion" for k in compiled.kernels
        ):
            causes.append(f"cudnn {before} -> {after}: cuDNN fusions")
        elif after < before:
            causes.append(
                f"{library} {before} -> {after}: fused or rewritten by XLA (e.g. small dots "
                "as element-wise multiply-reduce, convolutions as gemms)"
            )
        else:
            causes.append(
                f"{library} {before} -> {after}: dispatches XLA adds when it compiles "
                "(e.g. a library call for an op the lowered level counts as xla)"
            )
    return causes


def deviceless_vs_gpu_causes(deviceless: Any, gpu: Any) -> list[str]:
    """Why the census compiled on the GPU differs from the deviceless one (no autotuning)."""
    a, b = library_counts(deviceless), library_counts(gpu)
    causes = []
    triton = deviceless.xla_kinds.get("triton-gemm", 0), gpu.xla_kinds.get("triton-gemm", 0)
    if triton[0] != triton[1]:
        causes.append(
            f"autotuning picks: Triton gemms {triton[0]} deviceless vs {triton[1]} on the GPU "
            "(the GPU's autotuner chose between cuBLAS and XLA's Triton gemms)"
        )
    for library in sorted(set(a) | set(b)):
        before, after = a.get(library, 0), b.get(library, 0)
        if before == after or (library == "cublas" and triton[0] != triton[1]):
            continue
        if library == "cudnn":
            causes.append(f"cuDNN fusions: cudnn {before} deviceless vs {after} on the GPU")
        elif library == "cub":
            causes.append(
                f"CUB sort: {after} on the GPU, {before} deviceless (a deviceless compile "
                "has no CUB scratch-size data, so it keeps XLA's sort)"
            )
        else:
            causes.append(f"{library}: {before} deviceless vs {after} on the GPU")
    return causes


# -- the runtime-share estimate (pure given programs) ----------------------------------------


def flatten(program: Any, platform: str, level: str) -> list[tuple[Any, str, str | None, float]]:
    """Every distinct op site with its layer, library and run-time weight (call count x
    loop trip counts), as ``census.take_census`` weighs estimated time."""
    from pytest_jaxport.model.census import CALL_OPS, UNCOUNTED_OPS
    from pytest_jaxport.model.classification import classify

    out: list[tuple[Any, str, str | None, float]] = []

    def walk(name: str, weight: float, depth: int) -> None:
        if depth > 64:
            return
        for site in program.functions.get(name, ()):
            if site.op in CALL_OPS and site.target is not None:
                walk(site.target, weight * site.count * site.runs, depth + 1)
                continue
            if site.op in UNCOUNTED_OPS:
                continue
            target = site.target if site.op.endswith("custom_call") else None
            found = classify(platform, site.op, target, level=level)
            out.append((site, found.layer, found.library, weight * site.count))

    walk(program.entry, 1.0, 0)
    return out


def estimate_layers(
    flat: Sequence[tuple[Any, str, str | None, float]], peak: Any, calibration: Any
) -> dict[str, float]:
    from pytest_jaxport.model.roofline import kernel_seconds
    from pytest_jaxport.model.runtime_share import share_of

    timed = [
        (layer, lib, w * kernel_seconds(site, layer, peak, calibration))
        for site, layer, lib, w in flat
    ]
    return dict(share_of(timed, "estimated").layers)


def old_estimate_layers(program: Any, platform: str) -> dict[str, float]:
    """The estimate as it was before: a roofline of every lowered op, nothing else."""
    from pytest_jaxport.model.census import take_census
    from pytest_jaxport.model.runtime_share import share_of

    flops, bandwidth = OLD_PEAKS[platform]
    census = take_census(
        program, platform, seconds=lambda s, _: max(s.flops / flops, s.bytes / bandwidth)
    )
    return dict(share_of(census.estimated_seconds, "estimated").layers)


def worst_layer_points(estimated: Mapping[str, float], measured: Mapping[str, float]) -> float:
    """The estimate's error: the largest per-layer difference, in percentage points."""
    layers = ("xla", "vendor", "custom")
    return 100.0 * max(abs(estimated.get(k, 0.0) - measured.get(k, 0.0)) for k in layers)


def summary(errors: Sequence[float]) -> dict[str, float | int]:
    if not errors:
        return {"programs": 0}
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return {
        "programs": len(errors),
        "mean": round(statistics.fmean(errors), 1),
        "median": round(statistics.median(errors), 1),
        "p90": round(p90, 1),
        "max": round(max(errors), 1),
    }


# -- running one program -----------------------------------------------------------------------


class Harness:
    """Runs the plugin's check over the corpus and measures what it predicts."""

    def __init__(
        self,
        *,
        timing: bool,
        seconds: float,
        repeats: int,
        target: str,
        share_platforms: Sequence[str] | None = None,
        tpu_sizes: Sequence[str] = ("small",),
    ) -> None:
        from dataclasses import replace

        from pytest_jaxport._jax import deviceless, lowering
        from pytest_jaxport._jax.devices import present_platforms
        from pytest_jaxport.cache import CompileSettings
        from pytest_jaxport.model import gpu
        from pytest_jaxport.model.classification import classify
        from pytest_jaxport.model.config import ProjectConfig

        self.lowering = lowering
        self.timing = timing
        self.share_platforms = tuple(share_platforms) if share_platforms else None
        """The platforms whose share is measured (default: every one present)."""
        self.seconds = seconds
        self.repeats = repeats
        self.present = present_platforms()
        self.target = target
        self.target_config = gpu.load_gpu_description(target)
        self.cuda_problem = None if "cuda" in self.present else deviceless.cuda_plugin_problem()
        self.tpu_problem, self.tpu_compiler = _tpu_compiler()
        compile_platforms = (
            "cpu",
            *(() if self.cuda_problem else ("cuda",)),
            *(() if self.tpu_problem else ("tpu",)),
        )
        self.settings = CompileSettings(
            platforms=compile_platforms,
            target=target,
            target_config=self.target_config,
            tpu_compiler=self.tpu_compiler,
            libtpu=_installed("libtpu") or "",
        )
        self.config = ProjectConfig(platforms=PLATFORMS, compile=compile_platforms).resolve()
        self.tpu_sizes = tuple(tpu_sizes)
        """The sizes tpu compiles at (a large program compiles for minutes on 2 busy cores:
        fft_filter/large ran past 120 s, results/tpu-chip-deviceless-both-sizes-*.json)."""
        without_tpu = tuple(p for p in compile_platforms if p != "tpu")
        self.without_tpu = (
            replace(self.settings, platforms=without_tpu),
            ProjectConfig(platforms=PLATFORMS, compile=without_tpu).resolve(),
        )

        def classifier(platform: str, op: str, target: str | None) -> Any:
            return classify(platform, op, target)

        def compiled_classifier(platform: str, op: str, target: str | None) -> Any:
            return classify(platform, op, target, level="compiled")

        self.classifier = classifier
        self.compiled_classifier = compiled_classifier
        self.planes: dict[str, dict[str, float]] = {}
        """The last accelerator measurement's share per profiler plane."""
        self.training: list[dict[str, Any]] = []
        """Per measured program and platform: its flattened programs and measured layers,
        for the calibration (``--training``)."""

    def check(
        self, fn: Callable[..., Any], args: tuple[Any, ...], gradient: bool, size: str = "small"
    ) -> list[Any]:
        """The plugin's own check: probes for ``fn`` (and its gradient)."""
        from pytest_jaxport.fixture import Jaxport

        settings, config = (
            (self.settings, self.config) if size in self.tpu_sizes else self.without_tpu
        )
        jp = Jaxport(
            config=config,
            classifier=self.classifier,
            compiled_classifier=self.compiled_classifier,
            rootdir=REPO,
            compile_settings=settings,
            profile=False,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jp.check(fn, *args, transforms=("grad",) if gradient else ())
        return list(jp.probes)

    def run(self, program: corpus.Program, size: str) -> list[dict[str, Any]]:
        fn, args = program.build(size)
        probes = self.check(fn, args, program.gradient, size)
        variants: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [("fwd", fn, args)]
        if program.gradient:
            from pytest_jaxport._jax.transforms import transformed

            grad = transformed(fn, "grad", args, {})
            variants.append(("grad", grad, grad.args))
        rows = []
        for (mode, f, a), probe in zip(variants, probes, strict=True):
            key = f"{program.name}/{size}/{mode}"
            row: dict[str, Any] = {"program": program.name, "size": size, "mode": mode}
            row["counts"] = self.counts(probe)
            row["numerics"] = self.numerics(probe, mode)
            deviceless_text = None
            if "cuda" in self.present:
                row["gpu_vs_deviceless"], deviceless_text = self.gpu_vs_deviceless(f, a, probe)
            if self.timing:
                row["share"] = self.shares(key, f, a, probe, deviceless_text)
            rows.append(row)
        return rows

    # -- counts -----------------------------------------------------------------------------

    def counts(self, probe: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for platform in PLATFORMS:
            result = probe.platforms.get(platform)
            if result is None:
                continue
            entry: dict[str, Any] = {"lowered": None, "compiled": None}
            if result.census is None:
                entry["lowered_error"] = result.error
            else:
                entry["lowered"] = library_counts(result.census)
            if platform in COMPARED:
                if result.compiled is not None:
                    entry["compiled"] = library_counts(result.compiled)
                    entry["compiled_at"] = (
                        f"deviceless {result.target}" if result.deviceless else "device"
                    )
                    entry["xla_kinds"] = dict(result.compiled.xla_kinds)
                    if result.census is not None:
                        entry["agreement"] = agreement(entry["lowered"], entry["compiled"])
                        entry["causes"] = lowered_vs_compiled_causes(
                            platform, result.census, result.compiled
                        )
                elif platform == "cuda" and self.cuda_problem:
                    entry["compile_error"] = f"not compiled here: {self.cuda_problem}"
                elif platform == "tpu" and self.tpu_problem:
                    entry["compile_error"] = f"not compiled here: {self.tpu_problem}"
                elif platform == "tpu" and result.compile_error is None:
                    entry["compile_error"] = (
                        f"not compiled at this size (--tpu-sizes {','.join(self.tpu_sizes)})"
                    )
                else:
                    entry["compile_error"] = result.compile_error
            out[platform] = entry
        return out

    def numerics(self, probe: Any, mode: str) -> dict[str, Any]:
        from pytest_jaxport.model.numerics import default_tolerance, gradient_tolerance

        tolerance = (gradient_tolerance if mode == "grad" else default_tolerance)("float32")
        ran = [p for p, r in probe.platforms.items() if r.executed]
        out: dict[str, Any] = {
            "reference": probe.reference,
            "executed": ran,
            "tolerance_f32": {"rtol": tolerance.rtol, "atol": tolerance.atol},
        }
        compared = {}
        for platform, result in probe.platforms.items():
            if result.numerics is not None:
                n = result.numerics
                compared[platform] = {
                    "ok": n.ok,
                    "max_abs_err": n.max_abs_err,
                    "max_rel_err": n.max_rel_err,
                }
        out["compared"] = compared
        if not compared:
            out["note"] = probe.note or "only the reference ran"
        return out

    # -- runtime share -----------------------------------------------------------------------

    def shares(
        self,
        key: str,
        fn: Any,
        args: tuple[Any, ...],
        probe: Any,
        deviceless_text: str | None = None,
    ) -> dict[str, Any]:
        """Measured against estimated shares per present platform; on a GPU,
        ``deviceless_text`` (the same program compiled without it) is estimated too: that
        is the estimate a report made without the GPU prints."""
        from pytest_jaxport.model.census import take_census
        from pytest_jaxport.model.hlo import parse_compiled_hlo
        from pytest_jaxport.model.roofline import (
            CALIBRATION,
            estimated_share,
            kernel_seconds,
            peak_for,
        )

        out: dict[str, Any] = {}
        for platform in self.present:
            if platform not in PLATFORMS or (
                self.share_platforms is not None and platform not in self.share_platforms
            ):
                continue
            try:
                measured, noise, compiled_text, lowered_program = self.measure(fn, args, platform)
            except Exception as e:  # a program that cannot run or be profiled here: recorded
                out[platform] = {"error": self.lowering.describe_error(e)}
                continue
            peak = peak_for(platform, target_config=self.target_config, target=self.target)
            compiled_program = parse_compiled_hlo(compiled_text)
            flat_compiled = flatten(compiled_program, platform, "compiled")
            flat_lowered = flatten(lowered_program, platform, "lowered")

            def seconds(site: Any, layer: str, peak: Any = peak) -> float:
                return kernel_seconds(site, layer, peak)

            # The plugin's own estimate, as fixture.Jaxport computes it for a census.
            census = take_census(compiled_program, platform, level="compiled", seconds=seconds)
            plugin = estimated_share(census)
            compiled_layers = estimate_layers(flat_compiled, peak, CALIBRATION)
            lowered_layers = estimate_layers(flat_lowered, peak, CALIBRATION)
            assert plugin is not None
            assert all(abs(plugin.layers[k] - compiled_layers[k]) < 1e-9 for k in compiled_layers)
            before = old_estimate_layers(lowered_program, platform)
            # The lowered timing model alone: on cpu a lowered dot or convolution is xla until
            # XLA:CPU compiles it into a library call; count it as that call.
            timing = estimate_layers(
                [(site, "vendor" if site.op in CPU_LIBRARY_OPS and platform == "cpu" else layer,
                  library, weight) for site, layer, library, weight in flat_lowered],
                peak, CALIBRATION,
            )  # fmt: skip
            probe_share = probe.platforms[platform].runtime_share
            errors = {
                "compiled": round(worst_layer_points(compiled_layers, measured), 2),
                "lowered": round(worst_layer_points(lowered_layers, measured), 2),
                "before": round(worst_layer_points(before, measured), 2),
                "lowered_timing": round(worst_layer_points(timing, measured), 2),
            }
            deviceless_layers = None
            if platform == "cuda" and deviceless_text is not None:
                flat_deviceless = flatten(parse_compiled_hlo(deviceless_text), "cuda", "compiled")
                deviceless_layers = estimate_layers(flat_deviceless, peak, CALIBRATION)
                errors["compiled_deviceless"] = round(
                    worst_layer_points(deviceless_layers, measured), 2
                )
            out[platform] = {
                "measured": measured,
                "measured_by_plane": self.planes,
                "repeatability_points": round(noise, 2),
                "estimated_compiled": compiled_layers,
                "estimated_lowered": lowered_layers,
                "estimated_before": before,
                "plugin_label": probe_share.to_dict() if probe_share else None,
                "error_points": errors,
            }
            if deviceless_layers is not None:
                out[platform]["estimated_compiled_deviceless"] = deviceless_layers
            self.training.append(
                {
                    "key": key,
                    "platform": platform,
                    "measured": measured,
                    "compiled": flat_compiled,
                    "lowered": flat_lowered,
                }
            )
        return out

    def measure(
        self, fn: Any, args: tuple[Any, ...], platform: str
    ) -> tuple[dict[str, float], float, str, Any]:
        """The measured share (mean of ``repeats`` profiler sessions), their largest layer
        difference in points, the executable's HLO text and the lowered program."""
        from pytest_jaxport._jax import stablehlo, tracing
        from pytest_jaxport._jax.execution import compiled_text, execute
        from pytest_jaxport._jax.profile import measure
        from pytest_jaxport.model.classification import classify
        from pytest_jaxport.model.hlo import instruction_sites
        from pytest_jaxport.model.runtime_share import measured_share

        lowering = self.lowering
        traced = tracing.trace(fn, args, {})
        lowered = lowering.lower(traced, platform)
        program = stablehlo.read_program(lowered)
        execution = execute(fn, traced, lowered, platform, args, {})
        assert execution.rerun is not None
        text = compiled_text(execution.compiled)
        sites = instruction_sites(text)
        start = time.perf_counter()
        execution.rerun()
        once = max(time.perf_counter() - start, 1e-6)
        runs = max(3, min(500, int(self.seconds / once)))
        repeats = []
        for _ in range(self.repeats):
            times = measure(execution.rerun, runs=runs, warmup=1)
            share = measured_share(
                times, sites, lambda op, t: classify(platform, op, t, level="compiled")
            )
            repeats.append(dict(share.layers))
        layers = {k: statistics.fmean(r[k] for r in repeats) for k in repeats[0]}
        noise = max(worst_layer_points(a, b) for a in repeats for b in repeats)
        self.planes = {}
        if platform != "cpu":
            # The plugin sums hlo_op events over every plane; on an accelerator the device's
            # own planes are what a kernel costs there. Record both, to see if they differ.
            by_plane = times_by_plane(execution.rerun, runs)
            self.planes = {
                plane: dict(
                    measured_share(
                        times, sites, lambda op, t: classify(platform, op, t, level="compiled")
                    ).layers
                )
                for plane, times in by_plane.items()
            }
        return layers, noise, text, program

    # -- the GPU itself ------------------------------------------------------------------------

    def gpu_vs_deviceless(
        self, fn: Any, args: tuple[Any, ...], probe: Any
    ) -> tuple[dict[str, Any], str | None]:
        """On a GPU: the census compiled there against the deviceless one for ``target``,
        and the deviceless program's text (``None`` where it did not compile)."""
        from pytest_jaxport._jax.devices import device_kind
        from pytest_jaxport._jax.execution import compile_deviceless
        from pytest_jaxport.model.census import take_census
        from pytest_jaxport.model.hlo import parse_compiled_hlo

        real = probe.platforms["cuda"].compiled
        out: dict[str, Any] = {"device": device_kind("cuda")}
        try:
            text = compile_deviceless(fn, args, {}, target_config=self.target_config, options={})
        except self.lowering.LoweringFailure as e:
            out["deviceless_error"] = str(e)
            return out, None
        deviceless = take_census(
            parse_compiled_hlo(text), "cuda", level="compiled", classifier=self.compiled_classifier
        )
        out["deviceless"] = library_counts(deviceless)
        if real is None:
            out["gpu_error"] = probe.platforms["cuda"].compile_error
            return out, text
        out["gpu"] = library_counts(real)
        out["agreement"] = agreement(out["deviceless"], out["gpu"])
        out["causes"] = deviceless_vs_gpu_causes(deviceless, real)
        return out, text


def times_by_plane(run: Callable[[], object], runs: int) -> dict[str, dict[str, float]]:
    """Like ``profile.measure``, but self time per instruction for each profiler plane
    (``/device:GPU:0``, ``/host:CPU``...) separately."""
    from pytest_jaxport._jax.profile import profile, seconds_per_run

    trace = profile(run, runs=runs, warmup=1)
    return {plane: seconds_per_run(lines, runs) for plane, lines in trace.planes.items()}


def capture_target(folder: Path) -> dict[str, Any]:
    """``jaxport capture-target`` here, compared with the shipped description of this GPU;
    the captured description is written to ``folder``."""
    from pytest_jaxport._jax import deviceless
    from pytest_jaxport.model import gpu

    try:
        captured = deviceless.capture_target()
    except RuntimeError as e:
        return {"error": str(e)}
    kind = gpu.field_value(captured, "device_description_str") or ""
    shipped_name = next((v for k, v in SHIPPED_FOR_KIND.items() if k in kind), None)
    out: dict[str, Any] = {"device": kind, "shipped": shipped_name}
    fields = (
        "core_count",
        "fpus_per_core",
        "clock_rate_ghz",
        "memory_bandwidth",
        "l2_cache_size",
        "shared_memory_per_core",
        "runtime_version",
        "dnn_version",
    )
    mine = {f: gpu.field_value(captured, f) for f in fields}
    out["captured"] = mine
    if shipped_name is not None:
        shipped = gpu.load_gpu_description(shipped_name)
        theirs = {f: gpu.field_value(shipped, f) for f in fields}
        out["differs"] = {f: [theirs[f], mine[f]] for f in fields if theirs[f] != mine[f]}
    name = (shipped_name or "gpu") + "-captured.txtpb"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(captured, encoding="utf-8")
    out["written"] = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    return out


# -- the calibration's training set ----------------------------------------------------------


def training_data(training: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The measured programs as the calibration fits on them (``calibration/calibrate.py
    fit``): per program and platform, its measured layers and each level's flattened sites
    (an op's ``op``, ``target``, ``flops`` and ``bytes``, its layer, library and weight)."""

    def sites(flat: Sequence[tuple[Any, str, str | None, float]]) -> list[list[Any]]:
        return [
            [{"op": s.op, "target": s.target, "flops": s.flops, "bytes": s.bytes}, layer, lib, w]
            for s, layer, lib, w in flat
        ]

    return [
        {
            "key": row["key"],
            "platform": row["platform"],
            "measured": row["measured"],
            "compiled": sites(row["compiled"]),
            "lowered": sites(row["lowered"]),
        }
        for row in training
    ]


# -- the run -----------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30
            )
            return done.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    from pytest_jaxport._jax.devices import device_kind, present_platforms

    present = present_platforms()
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform_module.platform(),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "versions": {
            name: _installed(name)
            for name in (
                "jax",
                "jaxlib",
                "jax-cuda12-plugin",
                "jax-cuda12-pjrt",
                "jax-cuda13-plugin",
                "jax-cuda13-pjrt",
                "libtpu",
                "pytest-jaxport",
            )
        },
        "present_platforms": list(present),
        "devices": {p: device_kind(p) for p in present},
        "driver": _nvidia_driver() if "cuda" in present else None,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_platforms": os.environ.get("JAX_PLATFORMS", ""),
        "git_head": git("rev-parse", "HEAD"),
        "git_dirty_files": len(git("status", "--porcelain").splitlines()),
        "loadavg_start": list(os.getloadavg()),
    }


def _nvidia_driver() -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def default_target() -> str:
    """The shipped description of this machine's GPU (``h200`` on an H200), else ``h100``."""
    from pytest_jaxport._jax.devices import device_kind, present_platforms

    if "cuda" in present_platforms():
        kind = device_kind("cuda")
        for marker, name in SHIPPED_FOR_KIND.items():
            if marker in kind:
                return name
    return "h100"


def shipped_model() -> dict[str, Any]:
    """The estimate's constants this run used (``roofline.DEFAULT_PEAKS``, ``CALIBRATION``)."""
    from pytest_jaxport.model.roofline import CALIBRATION, DEFAULT_PEAKS, FUSED_SHARE

    return {
        "fused_share": FUSED_SHARE,
        "peaks": {
            p: {
                "flops": k.flops,
                "bandwidth": k.bandwidth,
                "launch": k.launch,
                "library_call": k.library_call,
                "source": k.source,
            }
            for p, k in DEFAULT_PEAKS.items()
        },
        "calibration": {
            "solver": CALIBRATION.solver,
            "fft": CALIBRATION.fft,
            "source": CALIBRATION.source,
        },
    }


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Corpus totals: agreement per platform, estimate errors per platform and source."""
    out: dict[str, Any] = {"agreement": {}, "share_error_points": {}}
    for platform in COMPARED:
        pairs = [
            (row["counts"][platform]["lowered"], row["counts"][platform]["compiled"])
            for row in rows
            if row["counts"].get(platform, {}).get("compiled") is not None
            and row["counts"][platform].get("lowered") is not None
        ]
        if pairs:
            out["agreement"][platform] = {"programs": len(pairs), "percent": overall(pairs)}
    gpu = [
        (r["gpu_vs_deviceless"]["deviceless"], r["gpu_vs_deviceless"]["gpu"])
        for r in rows
        if "gpu" in r.get("gpu_vs_deviceless", {})
    ]
    if gpu:
        out["agreement"]["cuda deviceless vs GPU"] = {"programs": len(gpu), "percent": overall(gpu)}
    for platform in PLATFORMS:
        measured = [
            r["share"][platform] for r in rows if "measured" in r.get("share", {}).get(platform, {})
        ]
        if not measured:
            continue
        sources = ["before", "lowered", "lowered_timing", "compiled"]
        if any("compiled_deviceless" in m["error_points"] for m in measured):
            sources.append("compiled_deviceless")
        out["share_error_points"][platform] = {
            source: summary(
                [m["error_points"][source] for m in measured if source in m["error_points"]]
            )
            for source in sources
        }
        out["share_error_points"][platform]["repeatability"] = summary(
            [m["repeatability_points"] for m in measured]
        )
        multi = [m for m in measured if max(m["measured"].values()) < 0.99]
        out["share_error_points"][platform]["compiled, programs with more than one layer"] = (
            summary([m["error_points"]["compiled"] for m in multi])
        )
    return out


def agreement_table(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per platform, per program variant, per library: the agreement (what CI guards)."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for row in rows:
        key = f"{row['program']}/{row['size']}/{row['mode']}"
        for platform, entry in row["counts"].items():
            if "agreement" in entry:
                table.setdefault(platform, {})[key] = entry["agreement"]
    return table


def gpu_device(results: Mapping[str, Any]) -> str | None:
    """The GPU a run compiled cuda on (its device kind), or ``None`` for a run without one
    (where cuda was compiled deviceless, if at all)."""
    env = results["environment"]
    if "cuda" not in env.get("present_platforms", ()):
        return None
    return str(env.get("devices", {}).get("cuda") or "cuda device")


def deviceless_vs_gpu_table(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per program variant, per library: the deviceless census's agreement with the GPU's."""
    return {
        f"{row['program']}/{row['size']}/{row['mode']}": row["gpu_vs_deviceless"]["agreement"]
        for row in rows
        if "agreement" in row.get("gpu_vs_deviceless", {})
    }


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def check_agreement(results: Mapping[str, Any], baseline_path: Path) -> list[str]:
    """What dropped against the baseline; empty when nothing did.

    With the same jaxlib as a recorded one, every (program, platform, library) agreement
    must be at least what was recorded (compiling is deterministic; a library a recorded
    program does not name agreed, both counts 0, and must still agree); with another jaxlib,
    each platform's corpus-wide agreement must be at least the newest recorded one's.
    On a GPU, cuda's census was compiled by the device (autotuned), not deviceless: it is
    held to what was recorded on that device (``devices`` in the baseline), never to the
    deviceless numbers; a device with nothing recorded yet has nothing to drop below.
    """
    try:
        baseline = json.loads(baseline_path.read_text(encoding="utf-8"))
        recorded = baseline["jaxlib"]
        if not isinstance(recorded, Mapping):
            raise TypeError(f"'jaxlib' is {type(recorded).__name__}, not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [
            f"{baseline_path}: not a fidelity baseline ({type(e).__name__}: {e}); write one "
            "with --update-baseline"
        ]
    jaxlib = results["environment"]["versions"]["jaxlib"]
    device = gpu_device(results)
    table = agreement_table(results["rows"])
    totals = results["aggregate"]["agreement"]
    entry = recorded.get(jaxlib, {})
    expected: dict[str, Mapping[str, Mapping[str, float]]] = {}
    if "programs" in entry:
        expected = {p: v for p, v in entry["programs"].items() if not (device and p == "cuda")}
        compiled = results.get("compiled")
        for platform in [p for p in expected if compiled is not None and p not in compiled]:
            log(f"agreement: {platform} not compiled in this run: its baseline is not checked")
            del expected[platform]
        sizes = results.get("tpu_sizes")
        if "tpu" in expected and sizes is not None:
            expected["tpu"] = {
                key: v for key, v in expected["tpu"].items() if key.split("/")[1] in sizes
            }
    on_device = entry.get("devices", {}).get(device) if device else None
    if on_device:
        expected["cuda"] = on_device["programs"].get("cuda", {})
    drops = []
    if expected:
        where = f" on {device}" if device else ""
        for platform, programs in expected.items():
            for key, libraries in programs.items():
                now = table.get(platform, {}).get(key)
                if now is None:
                    if results.get("scope", {}).get("all", True):
                        drops.append(f"{platform} {key}: no compiled census any more")
                    continue
                # a library the record does not name agreed there (both counts 0): one that
                # now disagrees is a prediction made worse too
                recorded_or_agreed = {**dict.fromkeys(now, 100.0), **libraries}
                for library, percent in recorded_or_agreed.items():
                    if now.get(library, 0.0) + 1e-6 < percent:
                        drops.append(
                            f"{platform} {key} {library}: agreement {now.get(library, 0.0):.0f}% "
                            f"< {percent:.0f}% recorded for jaxlib {jaxlib}"
                            + (where if platform == "cuda" else "")
                        )
        return drops
    with_totals = [v for v in recorded if "totals" in recorded[v]]
    if not with_totals:
        return drops
    newest = max(with_totals, key=_version_key)
    for platform, total in recorded[newest]["totals"].items():
        if device and platform.startswith("cuda"):
            continue  # deviceless totals: not what a device compiles
        now = totals.get(platform, {}).get("percent")
        if now is None or now + 1e-6 < total["percent"]:
            drops.append(
                f"{platform}: corpus agreement {now}% < {total['percent']:.1f}% recorded "
                f"for jaxlib {newest} (no baseline for {jaxlib} yet)"
            )
    return drops


def update_baseline(
    results: Mapping[str, Any], baseline_path: Path, *, source: str | None = None
) -> None:
    """Record this run's agreement for its jaxlib in ``baseline_path``.

    A run on a GPU records only what the device compiled, under ``devices`` with the
    device named (its cpu counts depend on the host's CPU, and the baseline's deviceless
    cuda counts are what CI checks), with ``source`` (the results file) when given.
    """
    try:
        baseline = json.loads(baseline_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        baseline = {
            "about": "lowered-vs-compiled census agreement on the fidelity corpus, "
            "per jaxlib; benchmarks/fidelity/run.py --agreement-check compares with it",
            "jaxlib": {},
        }
    jaxlib = results["environment"]["versions"]["jaxlib"]
    entry = baseline["jaxlib"].setdefault(jaxlib, {})
    device = gpu_device(results)
    if device is None:
        entry["totals"] = results["aggregate"]["agreement"]
        entry["programs"] = agreement_table(results["rows"])
    else:
        totals = results["aggregate"]["agreement"]
        entry.setdefault("devices", {})[device] = {
            "totals": {k: v for k, v in totals.items() if k.startswith("cuda")},
            "programs": {"cuda": agreement_table(results["rows"]).get("cuda", {})},
            "deviceless_vs_gpu": deviceless_vs_gpu_table(results["rows"]),
            "target": results.get("target"),
            **({"source": source} if source else {}),
        }
    tmp = baseline_path.with_name(f"{baseline_path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, baseline_path)


# -- Markdown ------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}%"


def _counts(counts: Mapping[str, int] | None) -> str:
    if counts is None:
        return "—"
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def cuda_plugin(versions: Mapping[str, str | None]) -> str:
    """The installed jax CUDA plugin, in words (``jax-cuda12-plugin 0.10.2``, or ``—``)."""
    found = [
        f"{name} {versions[name]}"
        for name in ("jax-cuda12-plugin", "jax-cuda13-plugin")
        if versions.get(name)
    ]
    return ", ".join(found) or "—"


def markdown(results: Mapping[str, Any]) -> str:
    env = results["environment"]
    rows = results["rows"]
    agg = results["aggregate"]
    v = env["versions"]
    lines = [
        "## Prediction fidelity (`benchmarks/fidelity/run.py`)",
        "",
        f"{env['date']}: {env['machine']}, {env['nproc']} CPUs, Python {env['python']}, "
        f"jax {v['jax']}, jaxlib {v['jaxlib']}, CUDA plugin {cuda_plugin(v)}; "
        f"present: {', '.join(env['present_platforms'])}"
        + (
            f" ({', '.join(f'{k}: {d}' for k, d in env['devices'].items())})"
            if env["devices"]
            else ""
        )
        + (f"; driver {env['driver']}" if env.get("driver") else "")
        + f"; git {env['git_head'][:8]}.",
        "",
    ]
    if "cuda" not in env["present_platforms"]:
        lines += [
            "No GPU here: the real-GPU columns (GPU-compiled census against deviceless, "
            "measured cuda share, `jaxport capture-target`) are not measured; "
            f"capture-target said: {results.get('capture_target', {}).get('error', '—')}",
            "",
        ]
    lines += ["### Counts: lowered census against compiled census", ""]
    for platform, entry in agg["agreement"].items():
        lines.append(
            f"- **{platform}**: {entry['percent']:.1f}% agreement over {entry['programs']} "
            "program variants (Σ min / Σ max of per-library dispatch counts)"
        )
    lines += [
        "",
        "| program | cpu lowered | cpu compiled | cpu agreement | cuda lowered | "
        "cuda compiled | cuda agreement | why they differ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        c = row["counts"]
        cells = []
        causes = []
        for platform in COMPARED:
            e = c.get(platform, {})
            agree = e.get("agreement")
            same = e.get("compiled") is not None and e.get("compiled") == e.get("lowered")
            worst = min(agree.values()) if agree else (100.0 if same else None)
            compiled = (
                _counts(e.get("compiled"))
                if e.get("compiled") is not None
                else ("not compiled" if e.get("compile_error") else "—")
            )
            cells += [_counts(e.get("lowered")), compiled, _pct(worst)]
            causes += [f"{platform}: {x}" for x in e.get("causes", ())]
            if e.get("lowered_error"):
                causes.append(f"{platform}: does not lower here: {str(e['lowered_error'])[:120]}")
            if e.get("compile_error") and "not compiled here" not in str(e.get("compile_error")):
                causes.append(f"{platform}: compile error: {str(e['compile_error'])[:90]}")
        name = f"{row['program']} {row['size']} {row['mode']}"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'; '.join(causes) or '—'} |")
    gpu_rows = [r for r in rows if r.get("gpu_vs_deviceless")]
    if gpu_rows:
        lines += [
            "",
            "### cuda: deviceless compiled census against the census compiled on the GPU",
            "",
            "| program | deviceless | GPU | agreement | why they differ |",
            "|---|---|---|---|---|",
        ]
        for row in gpu_rows:
            g = row["gpu_vs_deviceless"]
            agree = g.get("agreement")
            lines.append(
                f"| {row['program']} {row['size']} {row['mode']} | {_counts(g.get('deviceless'))} | "
                f"{_counts(g.get('gpu'))} | {_pct(min(agree.values()) if agree else None)} | "
                f"{'; '.join(g.get('causes', ())) or g.get('deviceless_error') or g.get('gpu_error') or '—'} |"
            )
    errors = agg.get("share_error_points", {})
    if errors:
        lines += [
            "",
            "### Runtime share: estimated against measured (percentage points, worst layer)",
            "",
        ]
        for platform, by_source in errors.items():
            lines += [
                f"**{platform}** (measured: profiler self time per compiled instruction, "
                "mean of the repeated sessions)",
                "",
                "| estimate | programs | mean | median | p90 | max |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            names = {
                "before": "before (roofline over lowered ops)",
                "lowered": "now, from the lowered program",
                "lowered_timing": "now, lowered, with cpu's dots and convolutions counted as "
                "the library calls XLA:CPU makes (the timing model alone)",
                "compiled": "now, from the compiled program",
                "compiled_deviceless": "now, from the program compiled without the GPU "
                "(deviceless: what a report made on a CPU-only machine estimates)",
                "compiled, programs with more than one layer": "now, compiled; programs with more than one layer",
                "repeatability": "the measurement against itself (its profiler sessions)",
            }
            for source, s in by_source.items():
                if s.get("programs"):
                    lines.append(
                        f"| {names.get(source, source)} | {s['programs']} | {s['mean']} | "
                        f"{s['median']} | {s['p90']} | {s['max']} |"
                    )
            lines.append("")
        fitted = results.get("fit")  # results recorded before the fit moved to calibration/
        if fitted and "leave_one_program_out_points" in fitted:
            lo = fitted["leave_one_program_out_points"]
            lines += [
                f"Refit on this run (`--fit`): in-sample mean {fitted['in_sample_points']['mean']}, "
                f"each program left out of the fit: mean {lo['mean']}, median {lo['median']}, "
                f"p90 {lo['p90']} points.",
                "",
            ]
        lines += [
            "| program | platform | measured xla / vendor / custom | before | lowered | compiled |",
            "|---|---|---|---:|---:|---:|",
        ]
        for row in rows:
            for platform, s in row.get("share", {}).items():
                if "measured" not in s:
                    lines.append(
                        f"| {row['program']} {row['size']} {row['mode']} | {platform} | {s.get('error')} | | | |"
                    )
                    continue
                m = s["measured"]
                e = s["error_points"]
                lines.append(
                    f"| {row['program']} {row['size']} {row['mode']} | {platform} | "
                    f"{m['xla']:.0%} / {m['vendor']:.0%} / {m['custom']:.0%} | "
                    f"{e['before']:.0f} | {e['lowered']:.0f} | {e['compiled']:.0f} |"
                )
    numerics = [(r, p, n) for r in rows for p, n in r["numerics"]["compared"].items()]
    lines += ["", "### Numerics against the reference (cpu)", ""]
    if numerics:
        lines += [
            "| program | platform | ok | max abs err | max rel err | f32 tolerance (rtol/atol) |",
            "|---|---|---|---:|---:|---|",
        ]
        for r, p, n in numerics:
            t = r["numerics"]["tolerance_f32"]
            lines.append(
                f"| {r['program']} {r['size']} {r['mode']} | {p} | {n['ok']} | "
                f"{n['max_abs_err']:.2e} | {n['max_rel_err']:.2e} | {t['rtol']}/{t['atol']} |"
            )
    else:
        lines.append("Only the reference platform (cpu) ran here: nothing to compare.")
    capture = results.get("capture_target")
    if capture and "error" not in capture:
        lines += [
            "",
            f"### `jaxport capture-target` on {capture['device']}",
            "",
            f"Written to `{capture['written']}`; fields that differ from the shipped "
            f"`{capture['shipped']}` description: "
            + (
                ", ".join(f"{k} {a} -> {b}" for k, (a, b) in capture.get("differs", {}).items())
                or "none"
            ),
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    corpus.ensure_host_devices()  # before JAX starts: the data-parallel step's cpu devices
    import pytest

    global Failed
    Failed = pytest.fail.Exception
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", help="comma-separated corpus programs (default: all)")
    parser.add_argument("--sizes", default="small,large", help="small, large or both")
    parser.add_argument(
        "--target",
        help="GPU description for deviceless cuda (default: the shipped one for this machine's "
        "GPU, else h100)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=0.2,
        help="profiled run time per measurement session (default 0.2 s)",
    )
    parser.add_argument("--repeats", type=int, default=2, help="profiler sessions per program")
    parser.add_argument(
        "--share-platforms",
        help="comma-separated platforms whose runtime share is measured (default: every "
        "platform present; a GPU run measures cuda only, cpu's is recorded already)",
    )
    parser.add_argument("--no-timing", action="store_true", help="counts and numerics only")
    parser.add_argument(
        "--tpu-sizes",
        default="small",
        help="sizes tpu compiles at, through libtpu (default small: a large program compiles "
        "for minutes on a busy 2-core machine)",
    )
    parser.add_argument(
        "--training",
        type=Path,
        metavar="FILE",
        help="also write the measured programs calibration/calibrate.py fits on",
    )
    parser.add_argument("--out", type=Path, help="results JSON (Markdown next to it as .md)")
    parser.add_argument(
        "--agreement-check",
        type=Path,
        metavar="BASELINE",
        help="counts only; exit 1 when agreement dropped below BASELINE",
    )
    parser.add_argument(
        "--update-baseline",
        type=Path,
        metavar="BASELINE",
        help="counts only; write this run's agreement into BASELINE",
    )
    args = parser.parse_args(argv)
    try:
        programs = corpus.by_name(args.programs)
    except ValueError as e:
        parser.error(str(e))
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if not sizes or any(s not in corpus.SIZES for s in sizes):
        parser.error(f"--sizes: expected small and/or large, found {args.sizes!r}")
    counts_only = bool(args.agreement_check or args.update_baseline)
    if args.training and (args.no_timing or counts_only):
        parser.error("--training needs the timing (drop --no-timing / the agreement options)")

    from pytest_jaxport._jax.deviceless import prefer_deviceless

    prefer_deviceless()
    target = args.target or default_target()
    share_platforms = [p.strip() for p in (args.share_platforms or "").split(",") if p.strip()]
    if any(p not in PLATFORMS for p in share_platforms):
        parser.error(
            f"--share-platforms: expected some of {', '.join(PLATFORMS)}, "
            f"found {args.share_platforms!r}"
        )
    harness = Harness(
        timing=not (args.no_timing or counts_only),
        seconds=args.seconds,
        repeats=max(1, args.repeats),
        target=target,
        share_platforms=share_platforms or None,
        tpu_sizes=[s.strip() for s in args.tpu_sizes.split(",") if s.strip()],
    )
    if harness.cuda_problem:
        log(f"cuda is not compiled here: {harness.cuda_problem}")
    if harness.tpu_problem:
        log(f"tpu is not compiled here: {harness.tpu_problem}")
    results: dict[str, Any] = {
        "environment": environment(),
        "model": shipped_model(),
        "target": target,
        "scope": {
            "programs": [p.name for p in programs],
            "sizes": sizes,
            "all": len(programs) == len(corpus.CORPUS) and len(sizes) == 2,
        },
        "rows": [],
        "complete": False,
        "compiled": list(harness.settings.platforms),
        "tpu_sizes": list(harness.tpu_sizes),
    }

    def save() -> None:
        """Write what is done so far: a run stopped by a time limit keeps its programs."""
        if not args.out:
            return
        results["aggregate"] = aggregate(results["rows"])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for path, text in (
            (args.out, json.dumps(results, indent=1, default=str) + "\n"),
            (args.out.with_suffix(".md"), markdown(results)),
        ):
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)

    for program in programs:
        for size in sizes:
            start = time.perf_counter()
            try:
                results["rows"] += harness.run(program, size)
            except (Exception, Failed) as e:  # a program that cannot be checked here: a finding
                results["rows"].append(
                    {
                        "program": program.name,
                        "size": size,
                        "mode": "all",
                        "counts": {},
                        "numerics": {"compared": {}},
                        "error": harness.lowering.describe_error(e),
                    }
                )
            log(f"{program.name} {size}: {time.perf_counter() - start:.1f} s")
            save()
    if not counts_only:
        results["capture_target"] = capture_target(args.out.parent if args.out else RESULTS)
    results["aggregate"] = aggregate(results["rows"])
    if args.training:
        args.training.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"rows": training_data(harness.training)}) + "\n"
        tmp = args.training.with_name(f"{args.training.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, args.training)
        log(f"wrote the calibration's training set to {args.training}")
    if harness.tpu_compiler is not None:
        harness.tpu_compiler.close()
    results["environment"]["loadavg_end"] = list(os.getloadavg())
    results["complete"] = True
    if args.out:
        save()
        log(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    elif not counts_only:
        print(markdown(results))
    for platform, entry in results["aggregate"]["agreement"].items():
        log(f"agreement {platform}: {entry['percent']:.1f}% over {entry['programs']} variants")
    if args.update_baseline:
        update_baseline(results, args.update_baseline)
        log(
            f"recorded agreement for jaxlib {results['environment']['versions']['jaxlib']} "
            f"in {args.update_baseline}"
        )
    if args.agreement_check:
        drops = check_agreement(results, args.agreement_check)
        for drop in drops:
            print(f"AGREEMENT DROPPED: {drop}", file=sys.stderr)
        if drops:
            return 1
        log("agreement: no drop against the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
