"""A real test suite audited with oneapi among the platforms (issue 41): serial and ``-n 2``.

The suite is one :mod:`audit_suites` knows (its selection, copied unchanged into a temporary
folder; nothing here edits it), run twice with ``--jaxport-audit`` and
``--jaxport-platforms=cpu,cuda,rocm,tpu,oneapi``: serially, then with ``-n 2``
(pytest-xdist), each without pytest's cache (both cold). It records the outcomes of both
(they must be the same), whether the two audits are identical (timings and each worker's
own cache misses aside, :func:`audit_suites.same_audit`), and the audit's numbers per
platform (:func:`audit_suites.audit_numbers`: lowered, census, solver kinds, kernels to
rewrite, days), oneapi's beside the others. Needs a JAX that lowers for oneapi (0.12+)::

    git -C lineax archive v0.1.1 tests | tar -x -C /tmp/lineax-0.1.1
    python benchmarks/oneapi_suite.py --suite lineax --from /tmp/lineax-0.1.1 \\
        --out benchmarks/results/oneapi-suite-lineax-2cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import audit_suites  # noqa: E402  (a script beside this one, not a package)

PLATFORMS = "cpu,cuda,rocm,tpu,oneapi"


def audit_twice(name: str, source: Path | None, out: Path) -> dict[str, Any]:
    spec = audit_suites.SUITES[name]
    if "folder" in spec:
        if source is None:
            raise SystemExit(f"{name} is not in its wheel: give its source, --from PATH")
        folder = audit_suites.copy_folder(name, source, out)
        options: list[str] = []
    else:
        folder = audit_suites.copy_suite(spec["package"], out)
        options = audit_suites.WHEEL_OPTIONS
    select = [*options, *spec["select"]]
    reports = {label: out / f"{name}-{label}.json" for label in ("serial", "n2")}
    runs = []
    for label, extra in (("serial", []), ("n2", ["-n", "2"])):
        args = [
            "-p", "no:cacheprovider", "--jaxport-audit", f"--jaxport-platforms={PLATFORMS}",
            f"--jaxport-report={reports[label]}", *extra,
        ]  # fmt: skip
        runs.append(audit_suites.run(folder, select, args, f"{name}-audit-{label}", out))
    serial, n2 = runs
    return {
        "suite": name,
        "select": spec["select"],
        "platforms": PLATFORMS.split(","),
        "runs": runs,
        "same_outcomes": serial["outcomes"] == n2["outcomes"],
        "tests": len(serial["outcomes"]),
        "outcome_counts": {
            o: list(serial["outcomes"].values()).count(o)
            for o in sorted(set(serial["outcomes"].values()))
        },
        "same_audit": audit_suites.same_audit(reports["serial"], reports["n2"]),
        "audit": audit_suites.audit_numbers(reports["serial"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="lineax", choices=sorted(audit_suites.SUITES))
    parser.add_argument("--from", dest="source", default=None, help="the suite's source folder")
    parser.add_argument("--out", default=str(HERE / "results" / "oneapi-suite-2cpu.json"))
    options = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jaxport-oneapi-suite-") as tmp:
        result = {
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "versions": audit_suites.versions(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_start": round(os.getloadavg()[0], 2),
            **audit_twice(options.suite, Path(options.source) if options.source else None,
                          Path(tmp)),
            "load_end": round(os.getloadavg()[0], 2),
            "seconds": round(time.perf_counter() - started, 1),
        }  # fmt: skip
    Path(options.out).write_text(json.dumps(result, indent=2) + "\n")
    same = result["same_audit"]
    print(
        f"{options.suite}: {result['tests']} tests {result['outcome_counts']}, outcomes "
        f"{'the same' if result['same_outcomes'] else 'DIFFER'} serial and -n 2; audit "
        f"{'identical' if same['identical'] else 'differs: ' + ', '.join(same['differing_keys'])}"
        f"; oneapi {result['audit']['census'].get('oneapi')}; written to {options.out}"
    )


if __name__ == "__main__":
    main()
