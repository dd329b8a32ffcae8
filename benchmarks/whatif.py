"""Candidate optimisations of pytest-jaxport, written here only to measure them.

Nothing in pytest_jaxport uses this module. Each function produces the same result as the
plugin's current code for the benchmark's programs (``inprocess.whatifs`` checks the census
is identical), so the timings say what the change would save.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pytest_jaxport import census as census_mod
from pytest_jaxport import lowering, targets
from pytest_jaxport.census import Census, Kernel, OpSite, Program, parse_location

# Ops whose location the census can need: custom calls, calls (their location is inherited by
# the callee's ops) and every op some rule classifies as non-xla on some platform. (With a
# user classify hook any op may be non-xla; the real change should then fetch locations in a
# second pass for the sites that came out non-xla. See README, optimisation 2.)
_LOCATED = frozenset(
    {"stablehlo.custom_call", "func.call", "call"}
    | {rule.pattern for rule in targets.RULES if not rule.custom_call}
)


def read_program_lean(lowered: Any) -> Program:
    """lowering.read_program, but ``str(location)`` only for ops in ``_LOCATED``."""
    module = lowered.compiler_ir("stablehlo")
    functions: dict[str, tuple[OpSite, ...]] = {}
    public: list[str] = []
    for func in module.body.operations:
        name = lowering._symbol(func.attributes["sym_name"])
        sites: list[OpSite] = []
        for region in func.regions:
            _collect(region, sites)
        functions[name] = tuple(sites)
        if "sym_visibility" not in func.attributes:
            public.append(name)
    entry = "main" if "main" in functions else (public or list(functions) or ["main"])[0]
    return Program(entry=entry, functions=functions)


_PLAIN: dict[str, OpSite] = {}


def _collect(region: Any, sites: list[OpSite]) -> None:
    append = sites.append
    for block in region.blocks:
        for op in block.operations:
            operation = op.operation
            name = operation.name
            if name in _LOCATED:
                target = None
                if name == "stablehlo.custom_call":
                    target = lowering._symbol(operation.attributes["call_target_name"])
                elif name in ("func.call", "call"):
                    target = lowering._symbol(operation.attributes["callee"])
                append(OpSite(op=name, target=target, location=str(operation.location)))
            else:
                site = _PLAIN.get(name)
                if site is None:
                    site = _PLAIN[name] = OpSite(op=name)
                append(site)
            if name not in lowering._REDUCER_OPS:
                for nested in operation.regions:
                    _collect(nested, sites)


def take_census_lazy(
    program: Program, platform: str, *, level: str = "lowered", classifier: Any = None
) -> Census:
    """census.take_census with locations parsed only where used, once per distinct text."""
    classify = classifier or (lambda p, o, t: targets.classify(p, o, t, level=level))
    locations: dict[str, Any] = {}
    memo: dict[tuple[str, Any], tuple[Counter[Any], Counter[str]]] = {}
    active: set[str] = set()

    def where(text: str | None, inherited: Any) -> Any:
        if not text:
            return inherited
        found = locations.get(text, False)
        if found is False:
            found = locations[text] = parse_location(text)
        return found or inherited

    def function(name: str, inherited: Any) -> tuple[Counter[Any], Counter[str]]:
        key = (name, inherited)
        if key in memo:
            return memo[key]
        if name in active:
            return Counter(), Counter()
        active.add(name)
        kernels: Counter[Any] = Counter()
        xla_ops: Counter[str] = Counter()
        for site in program.functions.get(name, ()):
            op = site.op
            if op in census_mod.CALL_OPS and site.target is not None:
                callee_kernels, callee_ops = function(site.target, where(site.location, inherited))
                kernels.update(callee_kernels)
                xla_ops.update(callee_ops)
                continue
            if op in census_mod._UNCOUNTED:
                continue
            target = site.target if op.endswith("custom_call") else None
            result = classify(platform, op, target)
            if result.layer == "xla":
                xla_ops[result.kind] += 1
            else:
                kernels[(result, target or op, where(site.location, inherited))] += 1
        active.discard(name)
        memo[key] = (kernels, xla_ops)
        return kernels, xla_ops

    counts, xla_kinds = function(program.entry, None)
    kernels = tuple(
        sorted(
            (
                Kernel(
                    layer=c.layer, name=n, kind=c.kind, library=c.library, location=loc, count=k
                )
                for (c, n, loc), k in counts.items()
            ),
            key=lambda k: (k.layer, k.name, str(k.location or "")),
        )
    )
    extra: dict[str, Any] = {}
    if "xla_kinds" in {f.name for f in dataclasses.fields(Census)}:  # newer census.py
        extra["xla_kinds"] = dict(sorted(xla_kinds.items()))
    return Census(
        platform=platform,
        level=level,  # type: ignore[arg-type]
        kernels=kernels,
        xla_ops=sum(xla_kinds.values()),
        **extra,
    )


def lower_multi(traced: Any, platforms: Sequence[str]) -> Any:
    """One multi-platform lowering (JAX emits per-platform branches only where rules differ)."""
    return traced.lower(lowering_platforms=tuple(platforms))


def jaxpr_key(traced: Any) -> str:
    """A warm-cache key candidate: sha256 of the closed jaxpr's text (no source locations)."""
    import hashlib

    return hashlib.sha256(str(traced.jaxpr).encode()).hexdigest()
