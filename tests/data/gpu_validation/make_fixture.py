"""Write the GPU-results test fixture that tests/test_benchmarks.py reads.

NOT A MEASUREMENT. These are the files ``benchmarks/validation/gpu.py`` writes after a run on
an NVIDIA GPU, built from invented numbers by the script's own summarising code, for a device
named "Fixture GPU (test data, not a measurement)". They exist so that the step that puts GPU
numbers in use (``calibration/calibrate.py adopt``) is tested before any GPU has run it.

    python tests/data/gpu_validation/make_fixture.py     # after a change to the format
    python tests/data/gpu_validation/make_fixture.py OUT  # elsewhere, to compare
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository's root: the benchmarks package

from benchmarks.fidelity import run as fidelity  # noqa: E402
from benchmarks.validation import gpu as gv  # noqa: E402
from benchmarks.validation import harness  # noqa: E402

DEVICE = "Fixture GPU (test data, not a measurement)"
NOTE = "test fixture written by tests/data/gpu_validation/make_fixture.py: invented numbers"
JAXLIB = "0.10.2"

SOLVE = {"cusolver": 1, "cublas": 2}
CONV = {"cudnn": 2, "cublas": 1}

# (program, size, mode, lowered cuda counts, deviceless compiled, compiled on the "GPU")
VARIANTS: list[tuple[str, str, str, dict[str, int], dict[str, int], dict[str, int]]] = [
    ("mlp", "small", "fwd", {"cublas": 3}, {}, {"cublas": 1}),
    ("mlp", "small", "grad", {"cublas": 8}, {}, {"cublas": 3}),
    ("mlp", "large", "fwd", {"cublas": 3}, {}, {"cublas": 3}),
    ("mlp", "large", "grad", {"cublas": 8}, {}, {"cublas": 8}),
    ("conv_nhwc", "small", "fwd", CONV, {"cudnn": 2}, {"cudnn": 2}),
    ("conv_nhwc", "large", "fwd", CONV, {"cudnn": 2}, CONV),
    ("fft_filter", "small", "fwd", {"cufft": 2}, {"cufft": 2}, {"cufft": 2}),
    ("fft_filter", "large", "fwd", {"cufft": 2}, {"cufft": 2}, {"cufft": 2}),
    ("solve", "small", "fwd", SOLVE, SOLVE, SOLVE),
    ("solve", "large", "fwd", SOLVE, SOLVE, SOLVE),
    ("sort", "small", "fwd", {}, {}, {}),
    ("sort", "large", "fwd", {}, {}, {"cub": 1}),
]


def layers(xla: float, vendor: float) -> dict[str, float]:
    return {"xla": xla, "vendor": vendor, "custom": round(1.0 - xla - vendor, 6)}


def fidelity_results() -> dict[str, Any]:
    rows = []
    for i, (program, size, mode, lowered, deviceless, gpu) in enumerate(VARIANTS):
        measured = layers(0.3 + 0.02 * i, 0.7 - 0.02 * i)
        errors = {
            "compiled": 6.0 + i,
            "compiled_deviceless": 9.0 + i,
            "lowered": 20.0 + 2 * i,
            "before": 40.0 + i,
            "lowered_timing": 15.0 + i,
        }
        rows.append(
            {
                "program": program,
                "size": size,
                "mode": mode,
                "counts": {
                    # cpu's counts are the CPU machine's business: none invented here.
                    "cpu": {"lowered": {}, "compiled": None, "compile_error": "fixture"},
                    "cuda": {
                        "lowered": lowered,
                        "compiled": gpu,
                        "compiled_at": "device",
                        "xla_kinds": {},
                        "agreement": fidelity.agreement(lowered, gpu),
                        "causes": [],
                    },
                },
                "numerics": {
                    "reference": "cpu",
                    "executed": ["cpu", "cuda"],
                    "tolerance_f32": {"rtol": 1e-06, "atol": 1e-06},
                    "compared": {
                        "cuda": {
                            "ok": True,
                            "max_abs_err": 1e-6 * (i + 1),
                            "max_rel_err": 1e-5 * (i + 1),
                        }
                    },
                },
                "share": {
                    "cuda": {
                        "measured": measured,
                        "measured_by_plane": {"/device:GPU:0": measured},
                        "repeatability_points": 1.0,
                        "estimated_compiled": measured,
                        "estimated_compiled_deviceless": measured,
                        "estimated_lowered": measured,
                        "estimated_before": measured,
                        "plugin_label": None,
                        "error_points": errors,
                    }
                },
                "gpu_vs_deviceless": {
                    "device": DEVICE,
                    "deviceless": deviceless,
                    "gpu": gpu,
                    "agreement": fidelity.agreement(deviceless, gpu),
                    "causes": (
                        ["autotuning picks: Triton gemms (fixture)"] if deviceless != gpu else []
                    ),
                },
            }
        )
    return {
        "fixture": NOTE,
        "environment": {
            "date": "2000-01-01T00:00:00+00:00",
            "machine": "fixture",
            "nproc": 16,
            "python": "3.12.0",
            "versions": {
                "jax": JAXLIB,
                "jaxlib": JAXLIB,
                "jax-cuda12-plugin": JAXLIB,
                "jax-cuda12-pjrt": JAXLIB,
                "jax-cuda13-plugin": None,
                "jax-cuda13-pjrt": None,
                "pytest-jaxport": "0.1.0",
            },
            "present_platforms": ["cuda", "cpu"],
            "devices": {"cuda": DEVICE, "cpu": "cpu"},
            "driver": "0.0 (fixture)",
            "xla_flags": "",
            "jax_platforms": "",
            "git_head": "0" * 40,
            "git_dirty_files": 0,
            "loadavg_start": [0.0, 0.0, 0.0],
        },
        "model": fidelity.shipped_model(),
        "target": "h200",
        "scope": {
            "programs": sorted({v[0] for v in VARIANTS}),
            "sizes": ["small", "large"],
            "all": False,
        },
        "rows": rows,
        "complete": True,
        "aggregate": fidelity.aggregate(rows),
        "capture_target": {"error": "not captured in the fixture"},
    }


def demo_report() -> dict[str, Any]:
    """A plugin report as the demo writes it on a GPU: two tests, cuda executed."""

    def check(name: str, ok: bool) -> dict[str, Any]:
        share = {
            "basis": "measured",
            "seconds": 1e-4,
            **layers(0.4, 0.6),
            "libraries": {"cublas": 0.6},
        }
        return {
            "name": name,
            "platforms": {
                "cuda": {
                    "executed": True,
                    "numerics": {
                        "platform": "cuda",
                        "reference": "cpu",
                        "leaves": 1,
                        "ok": ok,
                        "max_abs_err": 2e-4,
                        "max_rel_err": 3e-3,
                        "mismatches": [],
                    },
                    "runtime_share": share,
                    "compiled": {"libraries": {"cublas": 1}},
                },
            },
        }

    return {
        "environment": {
            "present_platforms": ["cuda", "cpu"],
            "executed_platforms": ["cuda", "cpu"],
        },
        "summary": {
            "outcomes": {"passed": 2},
            "runtime_share": {
                "cuda": {
                    "basis": "measured",
                    **layers(0.4, 0.6),
                    "libraries": {"cublas": 0.6},
                    "checks": 2,
                }
            },
        },
        "tests": [
            {
                "nodeid": "tests/test_models.py::test_mlp",
                "outcome": "passed",
                "checks": [check("mlp", True)],
            },
            {
                "nodeid": "tests/test_models.py::test_solve",
                "outcome": "passed",
                "checks": [check("solve", True)],
            },
        ],
    }


def overhead_data() -> dict[str, Any]:
    rep = {
        "tests": 5,
        "cold_ratio_wall": 1.1,
        "cold_ratio_cpu": 1.08,
        "warm_ratio_wall": 1.04,
        "warm_ratio_cpu": 1.03,
        "cold_added_per_test_s": 0.05,
        "b_cold_median_wall_s": 9.0,
        "summaries": {"a_cold": "5 passed in 6.00s"},
    }
    return {"cases": ["mlp_small"], "suites": {"checks": [rep, rep], "audit": [rep, rep]}}


def main(out: Path = HERE) -> None:
    results_fidelity = fidelity_results()
    (out / "fidelity-fixture.json").write_text(json.dumps(results_fidelity, indent=1) + "\n")
    shipped = (gv.TARGETS / "h200.txtpb").read_text(encoding="utf-8")
    captured = shipped.replace("clock_rate_ghz: 1.98", "clock_rate_ghz: 1.755").replace(
        'runtime_version: "12.9.0"', 'runtime_version: "13.0.0"'
    )
    summary = gv.fidelity_summary(results_fidelity, gpu=True, device=DEVICE)
    environment = {
        "python": "3.12.0",
        "versions": {
            name: results_fidelity["environment"]["versions"].get(name, "0.0 (fixture)")
            for name in gv.VERSIONS
        },
        "present_platforms": ["cuda", "cpu"],
        "devices": {"cuda": DEVICE, "cpu": "cpu"},
        "cuda_plugin_problem": None,
        "cuda_error": None,
        "jax_platforms": "",
    }
    results = {
        "about": gv.GPU.about,
        "fixture": NOTE,
        "schema_version": harness.SCHEMA_VERSION,
        "mode": "gpu",
        "name": "fixture",
        "device": {
            "kind": DEVICE,
            "name": DEVICE,
            "driver": "0.0",
            "memory": "0 MiB",
            "cuda": "0.0",
        },
        "budget_s": gv.GPU.budget_s,
        "host": {
            "date": "2000-01-01T00:00:00+00:00",
            "machine": "fixture",
            "nproc": 16,
            "git_head": "0" * 40,
            "git_dirty_files": 0,
            "loadavg_start": [0.0] * 3,
            "loadavg_end": [0.0] * 3,
        },
        "parts": {
            "environment": {"status": "done", "seconds": 1.0, "limit_s": 60, **environment},
            "capture": {
                "seconds": 1.0,
                "shipped": "h200",
                "device": DEVICE,
                "status": "done",
                "captured": "fixture-captured.txtpb",
                "error": None,
                **gv.diff_descriptions(shipped, captured),
                "limit_s": 30,
            },
            "demo": {
                "seconds": 1.0,
                "command": "-m pytest (fixture)",
                "exit": 0,
                "status": "done",
                "report": "demo-report-fixture.json",
                **gv.demo_summary(demo_report(), gpu=True),
                "limit_s": 100,
            },
            "fidelity": {
                "seconds": 1.0,
                "command": "fidelity.py (fixture)",
                "exit": 0,
                "status": "done",
                "results": "fidelity-fixture.json",
                **summary,
                "limit_s": 180,
            },
            "overhead": {
                "seconds": 1.0,
                "exit": 0,
                "status": "done",
                **harness.overhead_summary(overhead_data(), where="gpu"),
                "limit_s": 100,
            },
        },
        "cuda_error_band": summary["cuda_error_band"],
        "shipped_cuda_band": harness.shipped_band("cuda"),
        "setup": {
            "actions": ["nothing to install"],
            "seconds": 0.0,
            "wheelhouse": None,
            "interpreter": {},
        },
        "elapsed_s": 5.0,
    }
    (out / "gpu-validation-fixture.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "gpu-validation-fixture.md").write_text(gv.markdown(results))


if __name__ == "__main__":
    main(*(Path(a) for a in sys.argv[1:2]))
