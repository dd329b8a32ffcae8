"""The tpu emulation against the chip (issue 49): does ``--jaxport-emulate=tpu`` on a CPU say
what a TPU says?

    python -m benchmarks.validation.emulation_chip --out-dir DIR                 # on a TPU host
    python -m benchmarks.validation.emulation_chip --out-dir DIR --dry-run       # anywhere, CI: no chip
    python -m benchmarks.validation.emulation_chip --out-dir DIR --chip-outputs benchmarks/results/emulation-chip-tpu-v5-lite.npz

Every case of ``benchmarks/corpora/chip_corpus.py`` is run on the CPU (the reference), on the TPU
(where one is the default device; else read from ``--chip-outputs``, the chip's recorded
outputs), and emulated for tpu on the CPU through the plugin's own engine
(``pytest_jaxport._jax.emulate``), and compared at two tolerances: JAX's defaults per dtype
(float32 rtol = atol = 1e-6) and the demo's (rtol 1e-2, atol 1e-3). Per case and tolerance
it records the chip's verdict and worst error against the CPU, the emulation's verdict
(``match``, ``mismatch`` or ``may differ``, the plugin's three states) and worst error, and
the target:

- no emulated ``match`` where the chip differs;
- where both differ (the emulation says ``mismatch``), the emulated worst error within 3x
  of the chip's.

Writes ``emulation-chip.json`` and ``emulation-chip.md`` under ``--out-dir``, after every
case; on a chip also ``emulation-chip-outputs.npz``: the chip's outputs (and the chip
machine's CPU outputs), which ``benchmarks/results`` keeps as the reference CI reads
(``tests/test_emulation_chip.py``). ``--dry-run`` runs without a chip (a case of each kind,
:data:`DRY_RUN_CASES`, unless ``--cases`` names others): the same files, the chip columns
"not measured: no TPU". The validation harness for every accelerator runs this
as its "emulation against the chip" part.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.validation.chip_errors import NOT_MEASURED, device_facts

SCHEMA_VERSION = 1
DRY_RUN_CASES = ("matmul", "matmul_high", "matvec", "cumsum", "tanh", "eigvalsh")
"""What ``--dry-run`` runs unless ``--cases`` says otherwise: a case of each kind of rule and
bound, well inside the validation harness's limit for the part on a 2-core CI machine."""
TARGET_RATIO = 3.0
"""Where both differ, the emulated worst error is within this factor of the chip's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """A tolerance the verdicts are taken at."""

    name: str
    rtol: float | None
    """``None``: JAX's default for each dtype (``model.numerics.default_tolerance``)."""
    atol: float | None


SETTINGS = (
    Setting(name="jax-default", rtol=None, atol=None),
    Setting(name="demo", rtol=1e-2, atol=1e-3),
)


def tolerance_of(setting: Setting) -> Callable[[str], Any]:
    from pytest_jaxport.model.numerics import Tolerance, default_tolerance

    if setting.rtol is None or setting.atol is None:
        return default_tolerance

    def tolerance(dtype: str) -> Tolerance:
        bound = default_tolerance(dtype)
        if bound.exact:  # integers, keys: exact whatever the float tolerance is
            return bound
        return Tolerance(rtol=setting.rtol, atol=setting.atol, origin=f"the {setting.name} "
                         "tolerance")  # fmt: skip

    return tolerance


# -- running one case ---------------------------------------------------------------------------


def _leaves(value: Any) -> list[Any]:
    import jax
    import numpy as np

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(value)]


def run_cpu(fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    import jax

    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        return jax.jit(fn)(*jax.device_put(tuple(args), cpu))


def run_chip(fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    import jax

    return jax.block_until_ready(jax.jit(fn)(*args))


def chip_present() -> bool:
    import jax

    return jax.devices()[0].platform == "tpu"


def outputs_of(leaves: Sequence[Any], like: Any) -> Any:
    """``Outputs`` of the recorded ``leaves`` with the structure of ``like`` (the CPU's)."""
    import jax

    from pytest_jaxport._jax.outputs import to_outputs

    treedef = jax.tree_util.tree_structure(like)
    return to_outputs(jax.tree_util.tree_unflatten(treedef, list(leaves)))


def _err(comparison: Any) -> float:
    return float(comparison.max_abs_err)


def verdict_of(
    emulated: Any,
    bounded_run: Callable[[], Any] | None,
    reference: Any,
    comparison: Any,
    tolerance: Callable[[str], Any],
) -> str:
    """The plugin's own state for an emulation: ``match``, ``mismatch``, or (where the
    engine bounds what it cannot compute as the chip does) ``may differ``, as the plugin's
    fixture decides it (``pytest_jaxport.fixture``). ``bounded_run``: the emulation's bounded
    run, called only where the outputs matched (the caller runs it once per emulation)."""
    from pytest_jaxport.model import probe
    from pytest_jaxport.model.compare import compare
    from pytest_jaxport.model.emulation import may_differ

    if not comparison.ok or bounded_run is None:  # a mismatch, or an engine without bounds
        return "match" if comparison.ok else "mismatch"
    bounded = bounded_run()
    emulation = dataclasses.replace(emulated.emulation, bounded=bounded.sites)
    moved = None
    if bounded.outputs is not None:
        moved = compare(reference, bounded.outputs, reference_platform="cpu",
                        platform="tpu (bounded)", tolerance=tolerance)  # fmt: skip
    return str(probe.emulated_state(ran=True, failed=False, ok=True,
                                    may_differ=may_differ(emulation, moved)))  # fmt: skip


def judge(chip_ok: bool | None, emulated: str, chip_err: float | None, emu_err: float) -> str:
    """How the emulation's verdict stands against the chip's: ``agrees``, ``missed`` (the
    target's failure: emulated match where the chip differs), ``too far`` (both differ, worst
    errors more than 3x apart), ``false alarm`` (the chip matches), or ``not measured``
    (``not emulated`` where the emulation did not run: a failure of the target too)."""
    if chip_ok is None:
        return NOT_MEASURED
    if not chip_ok:
        if emulated == "match":
            return "missed"
        if emulated == "mismatch" and chip_err:
            ratio = emu_err / chip_err
            if not (1 / TARGET_RATIO <= ratio <= TARGET_RATIO):
                return "too far"
        return "agrees"
    return "agrees" if emulated == "match" else "false alarm"


def compare_case(
    name: str,
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    chip_leaves: Sequence[Any] | None,
    run_on_chip: bool,
    chip_only: bool = False,
) -> tuple[dict[str, Any], list[Any] | None, list[Any]]:
    """One case's verdicts at each setting; the chip's and the CPU's leaves."""
    from pytest_jaxport._jax.outputs import to_outputs
    from pytest_jaxport.model.compare import compare

    started = time.perf_counter()
    cpu_value = run_cpu(fn, args)
    reference = to_outputs(cpu_value)
    chip_outputs = None
    if run_on_chip:
        chip_value = run_chip(fn, args)
        chip_leaves = _leaves(chip_value)
    if chip_leaves is not None:
        chip_outputs = outputs_of(chip_leaves, cpu_value)
    entry: dict[str, Any] = {"settings": {}}
    from pytest_jaxport._jax.emulate import emulate

    emulated = None if chip_only else emulate(fn, args, platform="tpu")
    # Once per emulation, whatever the tolerance, and only where a tolerance needs it.
    bounded_run = None
    if emulated is not None and emulated.bounded is not None:
        bounded_run = functools.cache(emulated.bounded)
    for setting in SETTINGS:
        tolerance = tolerance_of(setting)
        row: dict[str, Any] = {}
        if chip_outputs is not None:
            chip = compare(reference, chip_outputs, reference_platform="cpu", platform="tpu",
                           tolerance=tolerance)  # fmt: skip
            row["chip"] = {"ok": chip.ok, "max_abs_err": _err(chip),
                           "max_rel_err": float(chip.max_rel_err)}  # fmt: skip
        else:
            row["chip"] = NOT_MEASURED
        if emulated is None:
            row["emulated"] = {"state": "not run", "why": "--chip-only"}
        elif emulated.outputs is None:
            row["emulated"] = {"state": "not run", "why": emulated.emulation.error or
                               [u.reason for u in emulated.emulation.unemulated]}  # fmt: skip
            if isinstance(row["chip"], dict):
                row["judged"] = "not emulated"
        else:
            comparison = compare(reference, emulated.outputs, reference_platform="cpu",
                                 platform="tpu (emulated on cpu)", tolerance=tolerance)  # fmt: skip
            state = verdict_of(emulated, bounded_run, reference, comparison, tolerance)
            row["emulated"] = {"state": state, "max_abs_err": _err(comparison),
                               "max_rel_err": float(comparison.max_rel_err)}  # fmt: skip
            chip_ok = row["chip"]["ok"] if isinstance(row["chip"], dict) else None
            chip_err = row["chip"]["max_abs_err"] if isinstance(row["chip"], dict) else None
            row["judged"] = judge(chip_ok, state, chip_err, _err(comparison))
            if isinstance(row["chip"], dict) and chip_err and state == "mismatch":
                row["ratio"] = _err(comparison) / chip_err
        entry["settings"][setting.name] = row
    entry["seconds"] = round(time.perf_counter() - started, 2)
    return entry, None if chip_leaves is None else list(chip_leaves), _leaves(cpu_value)


# -- the summary ------------------------------------------------------------------------------


def summary(cases: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for setting in SETTINGS:
        rows = [c["settings"][setting.name] for c in cases.values() if "settings" in c]
        judged = [r.get("judged", NOT_MEASURED) for r in rows]
        chip_differs = sum(1 for r in rows if isinstance(r["chip"], dict) and not r["chip"]["ok"])
        states: dict[str, int] = {}
        for r in rows:
            state = r["emulated"]["state"]
            states[state] = states.get(state, 0) + 1
        ratios = [r["ratio"] for r in rows if "ratio" in r]
        found[setting.name] = {
            "cases": len(rows),
            "chip_differs": chip_differs,
            "emulated": states,
            "missed": judged.count("missed"),
            "too_far": judged.count("too far"),
            "false_alarms": judged.count("false alarm"),
            "not_emulated": judged.count("not emulated"),
            "agrees": judged.count("agrees"),
            "worst_ratio": max(ratios, key=lambda r: abs(math.log(r)) if r > 0 else math.inf)
            if ratios else None,
            "target_met": None if not any(isinstance(r["chip"], dict) for r in rows)
            else not any(judged.count(j) for j in ("missed", "too far", "not emulated")),
        }  # fmt: skip
    return found


def markdown(results: Mapping[str, Any]) -> str:
    device = results["device"]
    lines = [
        "# The tpu emulation against the chip",
        "",
        f"Chip: {device.get('kind')} (jax {device.get('jax')}, libtpu {device.get('libtpu')}); "
        f"emulated with pytest-jaxport on the CPU; {results.get('chip_source', '')}.",
        "",
    ]
    for setting in SETTINGS:
        s = results["summary"][setting.name]
        lines += [
            f"## {setting.name} tolerance",
            "",
            f"{s['cases']} cases; the chip differs from the CPU in {s['chip_differs']}; "
            f"emulated: {', '.join(f'{n} {k}' for k, n in sorted(s['emulated'].items()))}; "
            f"missed (emulated match, chip differs): {s['missed']}; both differ, worst errors "
            f"more than {TARGET_RATIO:g}x apart: {s['too_far']}; false alarms: "
            f"{s['false_alarms']}; target met: {s['target_met']}.",
            "",
            "| case | chip | chip worst abs err | emulated | emulated worst abs err | judged |",
            "|---|---|---|---|---|---|",
        ]
        for name, case in results["cases"].items():
            if "settings" not in case:
                lines.append(f"| {name} | {case.get('error', '')} | | | | |")
                continue
            row = case["settings"][setting.name]
            chip = row["chip"]
            chip_text = chip if isinstance(chip, str) else ("match" if chip["ok"] else "differs")
            chip_err = "" if isinstance(chip, str) else f"{chip['max_abs_err']:.2e}"
            emu = row["emulated"]
            emu_err = f"{emu['max_abs_err']:.2e}" if "max_abs_err" in emu else ""
            lines.append(f"| {name} | {chip_text} | {chip_err} | {emu['state']} | {emu_err} | "
                         f"{row.get('judged', '')} |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


# -- the run ----------------------------------------------------------------------------------


def load_chip_outputs(path: Path) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    import numpy as np

    found: dict[str, list[Any]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in sorted(
            data.files, key=lambda k: (k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[1]))
        ):
            side, case, _ = key.split("/")
            if side == "chip":
                found.setdefault(case, []).append(data[key])
    facts_path = path.with_suffix(".json")
    facts = json.loads(facts_path.read_text())["device"] if facts_path.exists() else {}
    return found, facts


def run(
    out_dir: Path,
    *,
    dry_run: bool = False,
    chip_outputs: Path | None = None,
    names: Sequence[str] = (),
    chip_only: bool = False,
) -> dict[str, Any]:
    import numpy as np

    from benchmarks.corpora import chip_corpus

    if dry_run and not names:
        names = DRY_RUN_CASES
    on_chip = not dry_run and chip_outputs is None and chip_present()
    if not dry_run and chip_outputs is None and not on_chip:
        raise SystemExit("emulation_chip: no TPU here: pass --dry-run, or --chip-outputs FILE")
    recorded: dict[str, list[Any]] = {}
    device: dict[str, Any] = device_facts(dry_run=not on_chip)
    if chip_outputs is not None:
        recorded, device = load_chip_outputs(chip_outputs)
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "device": device,
        "host": device_facts(dry_run=True) | {"kind": "cpu"},
        "chip_source": "run on the chip" if on_chip else (
            f"the chip's recorded outputs ({chip_outputs.name})" if chip_outputs else NOT_MEASURED),
        "settings": {s.name: {"rtol": s.rtol, "atol": s.atol} for s in SETTINGS},
        "cases": {},
    }  # fmt: skip
    saved: dict[str, Any] = {}
    for case in chip_corpus.CASES:
        if names and case.name not in names:
            continue
        if not chip_corpus.available(case):
            results["cases"][case.name] = {"error": f"not run: needs {case.needs}"}
            continue
        try:
            args = case.inputs()
            entry, chip_leaves, cpu_leaves = compare_case(
                case.name, case.fn, args, chip_leaves=recorded.get(case.name),
                run_on_chip=on_chip, chip_only=chip_only,
            )  # fmt: skip
        except Exception as e:  # one case's failure leaves the others' verdicts
            results["cases"][case.name] = {"error": f"{type(e).__name__}: {e}"[:1500]}
            print(f"emulation_chip: {case.name}: {type(e).__name__}: {e}"[:500], flush=True)
            continue
        entry["what"] = case.what
        results["cases"][case.name] = entry
        if on_chip and chip_leaves is not None:
            for i, leaf in enumerate(chip_leaves):
                saved[f"chip/{case.name}/{i}"] = np.asarray(leaf)
            for i, leaf in enumerate(cpu_leaves):
                saved[f"cpu/{case.name}/{i}"] = np.asarray(leaf)
        judged = {s: entry["settings"][s].get("judged") for s in entry["settings"]}
        print(f"emulation_chip: {case.name:22s} {judged} ({entry['seconds']} s)", flush=True)
        results["summary"] = summary(results["cases"])
        _write(out_dir, results)
    results["summary"] = summary(results["cases"])
    _write(out_dir, results)
    if saved:
        np.savez_compressed(out_dir / "emulation-chip-outputs.npz", **saved)
    return results


def _write(out_dir: Path, results: Mapping[str, Any]) -> None:
    (out_dir / "emulation-chip.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "emulation-chip.md").write_text(markdown(results) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true", help="no chip: chip columns not measured")
    parser.add_argument("--chip-outputs", type=Path, help="the chip's recorded outputs (.npz)")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument(
        "--chip-only",
        action="store_true",
        help="record the chip's outputs and verdicts, emulate nothing",
    )
    args = parser.parse_args(argv)
    if args.dry_run or args.chip_outputs:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    names = tuple(n for n in args.cases.split(",") if n)
    results = run(
        args.out_dir,
        dry_run=args.dry_run,
        chip_outputs=args.chip_outputs,
        names=names,
        chip_only=args.chip_only,
    )
    for name, s in results["summary"].items():
        print(f"emulation_chip: {name}: {json.dumps(s)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
