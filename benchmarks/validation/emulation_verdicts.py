"""The tpu emulation's verdicts against the chip's, before and after a change of the emulation.

    python -m benchmarks.validation.emulation_verdicts \\
        --checks BEFORE.json AFTER.json --formats BEFORE.json AFTER.json \\
        --corpus BEFORE.json AFTER.json --out benchmarks/results/emulation-verdicts-issue55

Each pair is one corpus analysed by the emulation of two commits, on the chip's recorded
outputs: issue 55's 38 checks (``chip_checks.py analyse --emulate``), the 64 format programs
(``chip_formats.py analyse --emulate``) and the project's chip corpus
(``emulation_chip.py --chip-outputs``). Per corpus and tolerance it counts how the emulation
stands against the chip (``agrees``; ``missed``: an emulated "match" where the chip differs;
``false alarm``: "may differ" or "mismatch" where the chip matches; ``not emulated``), before
and after, and lists every case whose verdict changed. Run it with the "before" files made by
the older commit's package (``PYTHONPATH`` at a ``git archive`` of it).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

JUDGED = ("agrees", "missed", "false alarm", "not emulated")


def judged(corpus: str, results: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``{case: {tolerance: judged}}`` of one corpus's analysis, with the emulated state."""
    found: dict[str, dict[str, str]] = {}
    if corpus == "corpus":  # emulation_chip.py: per case, settings
        for name, case in results["cases"].items():
            found[name] = {s: f"{row.get('judged', 'not emulated')} ({row['emulated']['state']})"
                           for s, row in case.get("settings", {}).items() if "emulated" in row}  # fmt: skip
        return found
    cases = results["cases"] if corpus == "checks" else results["formats"]
    for name, case in cases.items():
        emulated = case.get("emulated", {})
        if corpus == "checks":
            states = {t: e["state"] for t, e in emulated.items()}
            verdicts = case.get("judged", {})
        else:
            states = {t: e["state"] for t, e in emulated.get("states", {}).items()}
            verdicts = emulated.get("judged", {})
        found[name] = {t: f"{v} ({states.get(t, '')})" for t, v in verdicts.items()}
    return found


def counts(rows: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, int]]:
    """Per tolerance, how many cases are judged each way."""
    found: dict[str, dict[str, int]] = {}
    for verdicts in rows.values():
        for t, v in verdicts.items():
            kind = v.split(" (")[0]
            found.setdefault(t, dict.fromkeys(JUDGED, 0))[kind] += 1
    return found


def compare(corpus: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    old, new = judged(corpus, before), judged(corpus, after)
    changed = {name: {t: [old[name].get(t), v] for t, v in verdicts.items()
                      if old.get(name, {}).get(t) != v}
               for name, verdicts in new.items()}  # fmt: skip
    return {"before": counts(old), "after": counts(new),
            "changed": {n: c for n, c in changed.items() if c}}  # fmt: skip


TITLES = {
    "checks": "Issue 55's 38 checks (`chip-checks-tpu-v5-lite`)",
    "formats": "The 64 format programs (`chip-formats-tpu-v5-lite`)",
    "corpus": "The project's chip corpus (`benchmarks/corpora/chip_corpus.py`, "
    "`emulation-chip-tpu-v5-lite`)",
}


ISSUE_TOLERANCES = ("1e-4", "1e-3", "1e-2")
"""The three tolerances of issue 55's 114 verdicts (38 checks each)."""


def _issue_tolerances(found: Mapping[str, Any]) -> str:
    """The before and after over issue 55's three tolerances, in one sentence."""

    def total(side: str, kind: str) -> int:
        return sum(found[side].get(t, {}).get(kind, 0) for t in ISSUE_TOLERANCES)

    said = ", ".join(f"{kind} {total('before', kind)} → {total('after', kind)}"
                     for kind in JUDGED)  # fmt: skip
    return (
        f"Over issue 55's three tolerances ({', '.join(ISSUE_TOLERANCES)}; 114 verdicts): {said}."
    )


def markdown(results: Mapping[str, Any]) -> str:
    lines = ["# The tpu emulation against the chip, before and after (issue 55 items 9 and 10)", "",
             results["about"], "",
             "Cells: before → after. *missed*: the emulation says `match` where the chip differs; "
             "*false alarm*: it says `may differ` or `mismatch` where the chip matches.", ""]  # fmt: skip
    for corpus, found in results["corpora"].items():
        tolerances = list(found["after"])
        lines += [f"## {TITLES[corpus]}", "", "| | " + " | ".join(tolerances) + " | all |",
                  "|---|" + "---|" * (len(tolerances) + 1)]  # fmt: skip
        for kind in JUDGED:
            pairs = [(found["before"].get(t, {}).get(kind, 0), found["after"][t][kind])
                     for t in tolerances]  # fmt: skip
            pairs.append((sum(b for b, _ in pairs), sum(a for _, a in pairs)))
            lines.append(f"| {kind} | " + " | ".join(f"{b} → {a}" for b, a in pairs) + " |")
        if corpus == "checks":
            lines += ["", _issue_tolerances(found)]
        lines += (
            ["", "Verdicts that changed:", ""] if found["changed"] else ["", "No verdict changed."]
        )
        for name, change in found["changed"].items():
            said = "; ".join(f"{t}: {b} → {a}" for t, (b, a) in change.items())
            lines.append(f"- `{name}`: {said}")
        lines.append("")
    return "\n".join(lines)


def render(path: Path) -> None:
    """Write the Markdown of an earlier run's JSON (``PATH.json`` -> ``PATH.md``) again."""
    results = json.loads(path.with_suffix(".json").read_text())
    path.with_suffix(".md").write_text(markdown(results))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for corpus in TITLES:
        parser.add_argument(f"--{corpus}", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--about", default="", help="the two commits, in words")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"about": args.about, "corpora": {}}
    for corpus in TITLES:
        pair = getattr(args, corpus)
        if pair is not None:
            before, after = (json.loads(p.read_text()) for p in pair)
            results["corpora"][corpus] = compare(corpus, before, after)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
