"""What one check found, and the versioned JSON report built from many.

A :class:`Probe` is the result of one ``jaxport.check``: per platform its census, lowering
and execution errors and numerics. Probes travel between pytest-xdist workers and the
controller as plain dicts (:meth:`Probe.to_dict`), and the report is JSON with a
``schema_version``, written atomically. The report holds data, never rendered sentences:
:mod:`pytest_jaxport.view` builds what each format shows from it.

Report shape (schema version 2)::

    {
      "schema_version": 2,
      "tool": {"name": "pytest-jaxport", "version": "..."},
      "environment": {"jax": "...", "jaxlib": "...", "python": "...", "machine": "...",
                      "present_platforms": ["cpu"]},
      "config": {"source": "pyproject.toml", "platforms": [...], "reference": "cpu"},
      "summary": {"tests": 3, "checks": 4, "failed_tests": 1, "violations": 2,
                  "outcomes": {"passed": 2, "failed": 1},
                  "platforms": {"cuda": {"vendor": 6, "custom": 1, "meta": 0, "xla": 40,
                                         "libraries": {"cublas": 4, ...},
                                         "lowered": 4, "failed_to_lower": 0,
                                         "vendor_sites": 3, "custom_sites": 1}},
                  "hotspots": [{"platform": "cuda", "location": "src/m.py:12", ...}]},
      "tests": [{"nodeid": "...", "outcome": "failed",
                 "violations": [{"check": "mlp", "platform": "cuda", "key": "max_vendor_calls",
                                 "limit": 1, "origin": "pyproject.toml ...", "found": 2,
                                 "what": "vendor calls", "level": "lowered",
                                 "kernels": [...], "details": []}],
                 "error": null,
                 "checks": [{"name": "mlp", "reference": "cpu", "note": null,
                             "variant_of": null, "transform": null,
                             "platforms": {"cuda": {
                                 "present": false, "lowered": {
                                     "level": "lowered", "vendor": 2, "custom": 0, "meta": 0,
                                     "xla": 31, "xla_kinds": {"xla": 31},
                                     "libraries": {"cublas": 2},
                                     "kernels": [{"name": "stablehlo.dot_general", ...}]},
                                 "error": null,
                                 "compiled": {"level": "compiled", ..., "deviceless": true,
                                              "target": "h100"},
                                 "compile_error": null,
                                 "executed": false, "execution_error": null,
                                 "numerics": null}}}]}]
    }

``lowered`` is ``null`` when lowering failed, and ``error`` says why; ``compiled`` (same
shape, plus ``deviceless`` and ``target``) is ``null`` unless the platform was compiled
(``compile = [...]``), and ``compile_error`` says why when compiling failed. A test's
``error`` (``message``, ``where``, ``when``) is why it failed or errored other than by a
budget: the exception of a crashed test, a worker that died, a portable test that checked
nothing.

Version 1 reports (``violations[].message`` and ``tests[].message`` as sentences,
``summary.layers`` as rendered rows) are read by :func:`load` through :func:`upgrade`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform as _platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_jaxport import __version__
from pytest_jaxport.census import Census, CollectiveCount, Kernel, SourceLocation
from pytest_jaxport.cost import (
    CostModel,
    RewriteEstimate,
    RewriteItem,
    RuntimeShare,
    combine,
    estimate,
    rewrite_items,
)
from pytest_jaxport.hotspots import (
    COUNTED_LAYERS,
    distinct_sites,
    hotspots,
    reaches_of_tests,
    site_order,
)
from pytest_jaxport.numerics import Comparison
from pytest_jaxport.targets import COLLECTIVE_LIBRARIES, NVIDIA_PLATFORM

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions :func:`load` reads; older ones are upgraded to :data:`SCHEMA_VERSION`."""
TOOL_NAME = "pytest-jaxport"


class ReportError(ValueError):
    """A report file cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformProbe:
    """One check on one platform: its census (or why lowering failed), execution, numerics."""

    platform: str
    present: bool
    census: Census | None = None
    error: str | None = None
    needs_hardware: str | None = None
    """``"GPU"`` when lowering failed only because JAX asked for hardware absent here
    (``error`` then reads "not lowerable here on jax X: needs a GPU (...)"): unknown, not
    non-portable. ``must_lower`` neither fails nor passes it; the check warns."""
    executed: bool = False
    execution_error: str | None = None
    numerics: Comparison | None = None
    compiled: Census | None = None
    """The compiled-level census, when this platform was compiled (``compile = [...]``)."""
    compile_error: str | None = None
    deviceless: bool = False
    """Whether ``compiled`` came from deviceless compilation (no GPU: no autotuning)."""
    target: str | None = None
    """What it was compiled for: the GPU description (``h100``) or the device kind."""
    what_if_no_vendor: Census | None = None
    """The compiled census with vendor libraries disabled (``what_if_no_vendor = true``)."""
    runtime_share: RuntimeShare | None = None
    """Where the time goes: measured where this platform ran and was profiled, else an
    estimate from the compiled program where there is one, else from the lowered one."""

    @property
    def lowered(self) -> bool:
        return self.census is not None

    @property
    def budgeted(self) -> Census | None:
        """The census budgets apply to: compiled where compiled, else lowered."""
        return self.compiled if self.compiled is not None else self.census


@dataclass(frozen=True, slots=True, kw_only=True)
class Untraced:
    """Why JAX could not trace a check on this machine: it needs something absent here
    (``cuDNN`` for ``platform`` cuda), so nothing was lowered, counted or run."""

    platform: str
    needs: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"platform": self.platform, "needs": self.needs, "error": self.error}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Untraced:
        return cls(
            platform=str(data["platform"]), needs=str(data["needs"]), error=str(data["error"])
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """Everything one ``jaxport.check`` found."""

    name: str
    reference: str
    platforms: Mapping[str, PlatformProbe] = field(default_factory=dict)
    note: str | None = None
    variant_of: str | None = None
    """For a transformation's check (``conv[grad]``), the check of the function itself."""
    transform: str | None = None
    """``grad``, ``vmap`` or ``jvp`` for a transformation's check; ``None`` otherwise."""
    untraced: Untraced | None = None
    """Set when the function could not be traced here (then ``platforms`` is empty)."""

    @property
    def executed(self) -> tuple[str, ...]:
        return tuple(p for p, r in self.platforms.items() if r.executed)

    def rewrite_items(self, target: str) -> list[RewriteItem] | None:
        """What moving this check from cuda to ``target`` needs; ``None`` when the check was
        not lowered for ``target`` (nothing is known), ``[]`` when it has no cuda census."""
        nvidia = self.platforms.get(NVIDIA_PLATFORM)
        on_target = self.platforms.get(target)
        if nvidia is None or nvidia.budgeted is None:
            return []
        if on_target is None:
            return None
        return rewrite_items(
            check=self.name,
            target=target,
            nvidia=nvidia.budgeted,
            on_target=on_target.budgeted,
            target_error=on_target.error,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reference": self.reference,
            "note": self.note,
            "variant_of": self.variant_of,
            "transform": self.transform,
            "platforms": {p: _platform_to_dict(r) for p, r in self.platforms.items()},
            **({"untraced": self.untraced.to_dict()} if self.untraced else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Probe:
        untraced = data.get("untraced")
        return cls(
            name=data["name"],
            reference=data["reference"],
            note=data.get("note"),
            variant_of=data.get("variant_of"),
            transform=data.get("transform"),
            platforms={p: _platform_from_dict(p, r) for p, r in data["platforms"].items()},
            untraced=Untraced.from_dict(untraced) if untraced else None,
        )


def census_to_dict(census: Census) -> dict[str, Any]:
    data: dict[str, Any] = {
        "level": census.level,
        "vendor": census.vendor,
        "custom": census.custom,
        "meta": census.meta,
        "xla": census.xla_ops,
        "xla_kinds": dict(census.xla_kinds),
        "libraries": census.libraries(),
        "kernels": [kernel_to_dict(k) for k in census.kernels],
    }
    if census.collectives:
        data["collectives"] = collectives_to_dict(census)
    return data


def collectives_to_dict(census: Census) -> dict[str, dict[str, Any]]:
    """``{"all-reduce": {"count": 7, "inserted": 6, "library": "nccl", "counterparts":
    {"rocm": "rccl", "tpu": "ici", "cpu": "xla-cpu"}}}``: collectives by kind, what runs them
    on this platform and on the others. ``inserted`` (how many the SPMD partitioner added)
    is known at the lowered level only."""
    library = COLLECTIVE_LIBRARIES.get(census.platform)
    counterparts = {p: lib for p, lib in COLLECTIVE_LIBRARIES.items() if p != census.platform}
    return {
        c.kind: {
            "count": c.count,
            **({"inserted": c.inserted} if census.level == "lowered" else {}),
            "library": library,
            "counterparts": counterparts,
        }
        for c in census.collectives
    }


def census_from_dict(platform: str, data: Mapping[str, Any]) -> Census:
    return Census(
        platform=platform,
        level=data.get("level", "lowered"),
        xla_ops=data.get("xla", 0),
        xla_kinds=dict(data.get("xla_kinds") or {}),
        kernels=tuple(kernel_from_dict(k) for k in data.get("kernels", ())),
        collectives=tuple(
            CollectiveCount(kind=kind, count=found["count"], inserted=found.get("inserted", 0))
            for kind, found in sorted((data.get("collectives") or {}).items())
        ),
    )


def kernel_to_dict(kernel: Kernel) -> dict[str, Any]:
    return {
        "name": kernel.name,
        "layer": kernel.layer,
        "library": kernel.library,
        "kind": kernel.kind,
        "count": kernel.count,
        "location": str(kernel.location) if kernel.location else None,
    }


def kernel_from_dict(data: Mapping[str, Any]) -> Kernel:
    location = None
    if data.get("location"):
        file, _, line = str(data["location"]).rpartition(":")
        location = SourceLocation(file=file, line=int(line))
    return Kernel(
        layer=data["layer"],
        name=data["name"],
        kind=data["kind"],
        library=data.get("library"),
        location=location,
        count=data.get("count", 1),
    )


def _platform_to_dict(result: PlatformProbe) -> dict[str, Any]:
    compiled = None
    if result.compiled is not None:
        compiled = {
            **census_to_dict(result.compiled),
            "deviceless": result.deviceless,
            "target": result.target,
        }
    data = {
        "present": result.present,
        "lowered": census_to_dict(result.census) if result.census else None,
        "error": result.error,
        "compiled": compiled,
        "compile_error": result.compile_error,
        "executed": result.executed,
        "execution_error": result.execution_error,
        "numerics": result.numerics.to_dict() if result.numerics else None,
        "runtime_share": result.runtime_share.to_dict() if result.runtime_share else None,
    }
    if result.what_if_no_vendor is not None:
        data["what_if_no_vendor"] = census_to_dict(result.what_if_no_vendor)
    if result.needs_hardware is not None:
        data["needs_hardware"] = result.needs_hardware
    return data


def _platform_from_dict(platform: str, data: Mapping[str, Any]) -> PlatformProbe:
    lowered = data.get("lowered")
    compiled = data.get("compiled")
    what_if = data.get("what_if_no_vendor")
    numerics = data.get("numerics")
    share = data.get("runtime_share")
    return PlatformProbe(
        platform=platform,
        present=data.get("present", False),
        census=census_from_dict(platform, lowered) if lowered else None,
        error=data.get("error"),
        needs_hardware=data.get("needs_hardware"),
        executed=data.get("executed", False),
        execution_error=data.get("execution_error"),
        numerics=Comparison.from_dict(numerics) if numerics else None,
        compiled=census_from_dict(platform, compiled) if compiled else None,
        compile_error=data.get("compile_error"),
        deviceless=bool(compiled.get("deviceless", False)) if compiled else False,
        target=compiled.get("target") if compiled else None,
        what_if_no_vendor=census_from_dict(platform, what_if) if what_if else None,
        runtime_share=RuntimeShare.from_dict(share) if share else None,
    )


def numerics_status(probe: Probe, platform: str) -> str:
    """``reference``, ``match``, ``mismatch``, ``not executed``, ``not present`` or ``error``."""
    result = probe.platforms[platform]
    return numerics_state(
        present=result.present,
        executed=result.executed,
        failed=bool(result.execution_error),
        reference=platform == probe.reference,
        ok=None if result.numerics is None else result.numerics.ok,
    )


def numerics_state(
    *, present: bool, executed: bool, failed: bool, reference: bool, ok: bool | None
) -> str:
    """The numerics status of one check on one platform, from its facts (one rule for the
    typed :class:`Probe` and for a report's dicts)."""
    if failed:
        return "error"
    if not executed:
        return "not present" if not present else "not executed"
    if reference:
        return "reference"
    if ok is None:
        return "not compared"
    return "match" if ok else "mismatch"


# -- the report ---------------------------------------------------------------------------


def environment(present: Iterable[str], versions: Mapping[str, str]) -> dict[str, Any]:
    return {
        **versions,
        "python": _platform.python_version(),
        "machine": f"{_platform.system()}-{_platform.machine()}",
        "present_platforms": list(present),
    }


def count_suite(tests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Suite totals: tests, checks, violations, and per platform counts by layer and library.

    Counts come from the level budgets apply at: the compiled census where a check was
    compiled, the lowered one elsewhere. Platforms whose checks have collectives carry
    ``collectives``: per kind, ``count`` (call-weighted, summed over checks) and ``inserted``
    (how many of them the SPMD partitioner added). Platforms with compiling configured also carry
    ``compiled`` and ``failed_to_compile`` (how many checks reached each outcome); platforms
    JAX could not lower for without their hardware carry ``needs_hardware`` (those checks
    are not in ``failed_to_lower``).
    """
    tests = list(tests)
    platforms: dict[str, dict[str, Any]] = {}
    checks = 0
    for test in tests:
        for check in test.get("checks", ()):
            checks += 1
            for name, result in check["platforms"].items():
                totals = platforms.setdefault(
                    name,
                    {"vendor": 0, "custom": 0, "meta": 0, "libraries": {}, "lowered": 0,
                     "failed_to_lower": 0},
                )  # fmt: skip
                lowered = result.get("lowered")
                if lowered is None:
                    unknown = "needs_hardware" if result.get("needs_hardware") else None
                    key = unknown or "failed_to_lower"
                    totals[key] = totals.get(key, 0) + 1
                    continue
                totals["lowered"] += 1
                compiled = result.get("compiled")
                if compiled is not None or result.get("compile_error"):
                    totals.setdefault("compiled", 0)
                    totals.setdefault("failed_to_compile", 0)
                    totals["compiled" if compiled is not None else "failed_to_compile"] += 1
                counted = compiled if compiled is not None else lowered
                for layer in ("vendor", "custom", "meta"):
                    totals[layer] += counted[layer]
                totals["xla"] = totals.get("xla", 0) + counted.get("xla", 0)
                for library, n in counted["libraries"].items():
                    totals["libraries"][library] = totals["libraries"].get(library, 0) + n
                for kind, found in (counted.get("collectives") or {}).items():
                    summed = totals.setdefault("collectives", {}).setdefault(
                        kind, {"count": 0, "inserted": 0}
                    )
                    summed["count"] += found.get("count", 0)
                    summed["inserted"] += found.get("inserted", 0)
    for totals in platforms.values():
        totals["libraries"] = dict(sorted(totals["libraries"].items()))
    outcomes: dict[str, int] = {}
    for test in tests:
        outcome = str(test.get("outcome", "passed"))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "tests": len(tests),
        "checks": checks,
        "failed_tests": sum(1 for t in tests if t.get("outcome") in ("failed", "error")),
        "violations": sum(len(t.get("violations", ())) for t in tests),
        "outcomes": dict(sorted(outcomes.items())),
        "platforms": dict(sorted(platforms.items())),
    }


def suite_shares(tests: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per platform, the suite's runtime share: every check weighted by its time."""
    by_platform: dict[str, list[RuntimeShare]] = {}
    for test in tests:
        for check in test.get("checks", ()):
            for platform, result in check["platforms"].items():
                share = result.get("runtime_share")
                if share:
                    by_platform.setdefault(platform, []).append(RuntimeShare.from_dict(share))
    shares = {}
    for platform, parts in sorted(by_platform.items()):
        total = combine(parts)
        if total is not None:
            shares[platform] = total.to_dict()
    return shares


def suite_rewrite(
    tests: Iterable[Mapping[str, Any]],
    *,
    migrate_to: Iterable[str],
    model: CostModel,
    tooling_assumptions: int = 0,
    price: Callable[[RewriteItem], float | None] | None = None,
) -> dict[str, RewriteEstimate]:
    """Per target, the distinct kernels to rewrite over the suite and the days to do it."""
    checks = [c for t in tests for c in t.get("checks", ())]
    estimates = {}
    for target in migrate_to:
        items: list[RewriteItem] = []
        for check in checks:  # read only the two platforms each target compares
            wanted = {p: e for p, e in check["platforms"].items() if p in (NVIDIA_PLATFORM, target)}
            probe = Probe.from_dict({**check, "platforms": wanted})
            items += probe.rewrite_items(target) or ()
        priced = {}
        if price is not None:
            for item in items:
                days = price(item)
                if days is not None:
                    priced[item] = days
        estimates[target] = estimate(
            target, items, model=model, tooling_assumptions=tooling_assumptions, priced=priced
        )
    return estimates


def suite_numbers(
    tests: Sequence[Mapping[str, Any]],
    *,
    migrate_to: Iterable[str],
    model: CostModel,
    tooling: Mapping[str, Any] | None = None,
    price: Callable[[RewriteItem], float | None] | None = None,
) -> dict[str, Any]:
    """The three numbers of a suite, for ``summary``: runtime share per platform, kernels to
    rewrite and engineering days per target (with the breakdown and the cost model), and the
    tooling scan where there is one. One computation for a run and for ``jaxport merge``."""
    estimates = suite_rewrite(
        tests,
        migrate_to=migrate_to,
        model=model,
        tooling_assumptions=len(tooling.get("assumptions") or ()) if tooling else 0,
        price=price,
    )
    numbers: dict[str, Any] = {
        "runtime_share": suite_shares(tests),
        "kernels_to_rewrite": {t: e.kernels_to_rewrite for t, e in estimates.items()},
        "rewrite_days": {t: e.days for t, e in estimates.items()},
        "rewrite": {t: e.to_dict() for t, e in estimates.items()},
        "cost_model": dataclasses.asdict(model),
    }
    if tooling is not None:
        numbers["tooling"] = dict(tooling)
    return numbers


def build_report(
    tests: Iterable[Mapping[str, Any]],
    *,
    config: Mapping[str, Any],
    environment: Mapping[str, Any],
) -> dict[str, Any]:
    """The whole report; tests sorted by node id so runs with and without xdist agree."""
    ordered = sorted((dict(t) for t in tests), key=lambda t: t["nodeid"])
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "environment": dict(environment),
        "config": dict(config),
        "summary": summarize(ordered),
        "tests": ordered,
    }


def summarize(tests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`count_suite` plus where the lock-in lives: ``hotspots``, every distinct vendor
    or custom site (:mod:`pytest_jaxport.hotspots`), and per platform ``vendor_sites`` and
    ``custom_sites``, the distinct-site figures set against the per-check sums."""
    tests = list(tests)
    summary = count_suite(tests)
    found = hotspots(reaches_of_tests(tests))
    sites = distinct_sites(found)
    for platform, totals in summary["platforms"].items():
        for layer, n in sites.get(platform, dict.fromkeys(COUNTED_LAYERS, 0)).items():
            totals[f"{layer}_sites"] = n
    # Stored in a fixed order (the view sorts by weight): times differ run to run.
    summary["hotspots"] = [h.to_dict() for h in sorted(found, key=site_order)]
    return summary


TIMING_KEYS = frozenset({"runtime_share", "seconds", "share"})
"""Report keys that hold measured times (or text made from them): they differ run to run."""


def without_timings(data: Any) -> Any:
    """``data`` with every measured-time key removed: what two runs of the same suite on the
    same machine must agree on exactly (counts, outcomes, numerics status)."""
    if isinstance(data, Mapping):
        return {k: without_timings(v) for k, v in data.items() if k not in TIMING_KEYS}
    if isinstance(data, list):
        return [without_timings(v) for v in data]
    return data


def write_json(path: Path, report: Mapping[str, Any]) -> None:
    """Write atomically: a temporary file in the same folder, then ``os.replace``. Compact
    (no indentation): a 2,000-test report is half the size and written five times faster;
    ``jaxport show`` is the way to read one."""
    write_text(path, json.dumps(report) + "\n")


def write_text(path: Path, text: str) -> None:
    """Atomic text write; a run killed mid-write leaves the previous file intact."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load(path: Path) -> dict[str, Any]:
    """Read a report of any version in :data:`READABLE_VERSIONS`, upgraded to this one;
    refuse anything else with a :class:`ReportError` naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot be read: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON (truncated?): {e}") from None
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(tool, dict) or tool.get("name") != TOOL_NAME:
        raise ReportError(f"{path}: not a pytest-jaxport report")
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise ReportError(
            f"{path}: schema_version {version!r} is not supported "
            f"(this pytest-jaxport {__version__} reads versions {readable})"
        )
    try:
        return upgrade(data)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise ReportError(
            f"{path}: malformed version {version} report ({type(e).__name__}: {e})"
        ) from None


def upgrade(data: Mapping[str, Any]) -> dict[str, Any]:
    """A report of an older schema version as this version's (a copy; this version as is).

    Version 1 stored sentences: each violation's ``message`` (its fields are recovered from
    it), a test's ``message`` (now ``error`` where it was not the violations), and
    ``summary.layers`` (dropped: the view builds the layer table). The summary is counted
    again, which adds ``outcomes``, ``hotspots`` and the per-platform distinct sites.
    """
    if data.get("schema_version") == SCHEMA_VERSION:
        return dict(data)
    tests = [_upgrade_test(t) for t in data.get("tests") or []]
    summary = {k: v for k, v in (data.get("summary") or {}).items() if k != "layers"}
    summary.update(summarize(tests))
    return {
        **data,
        "schema_version": SCHEMA_VERSION,
        "upgraded_from": data.get("schema_version"),
        "summary": summary,
        "tests": tests,
    }


def _upgrade_test(test: Mapping[str, Any]) -> dict[str, Any]:
    upgraded = {k: v for k, v in test.items() if k != "message"}
    violations = [_upgrade_violation(v) for v in test.get("violations") or []]
    upgraded["violations"] = violations
    message = test.get("message")
    if message and not violations:
        upgraded["error"] = {"message": str(message), "where": None, "when": "call"}
    return upgraded


def _upgrade_violation(violation: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1's ``message`` (``check 'c' on p: key = limit (set in o), found F WHAT
    (level)`` and indented detail lines) as version 2's ``what`` and ``details``."""
    headline, *rest = str(violation.get("message") or "").split("\n")
    found, level = violation.get("found"), str(violation.get("level", "lowered"))
    what = ""
    _, marker, tail = headline.partition(f"), found {found} ")
    if marker and tail.endswith(f" ({level})"):
        what = tail[: -len(f" ({level})")]
    upgraded = {k: v for k, v in violation.items() if k != "message"}
    upgraded["what"] = what
    upgraded["kernels"] = []
    upgraded["details"] = [line.strip() for line in rest if line.strip()]
    if violation.get("key") == "must_lower":
        upgraded["found"] = f"fails to {what}"
    return upgraded
