"""Census and numerics against the budget: which limits a check broke, and why (pure).

A message leads with the finding, so pytest's one-line short summary shows it::

    cuda: 1 custom call > 0 (max_custom_calls, set in pyproject.toml [tool.jaxport.budget]);
    check 'attention', lowered
        __gpu$xla.gpu.triton (pallas-triton) at src/kernels.py:12

(one line in the terminal). The report stores each violation's fields, never the sentence:
:meth:`Violation.to_dict` / :meth:`Violation.from_dict`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from pytest_jaxport.model.census import Kernel
from pytest_jaxport.model.config import Budget
from pytest_jaxport.model.cost import CostModel, RuntimeShare, estimate
from pytest_jaxport.model.emulation import divergence_message, emulated_label, emulation_lines
from pytest_jaxport.model.formats import Finding, FormatCensus, rule_source
from pytest_jaxport.model.numerics import describe, tolerance_origin
from pytest_jaxport.model.probe import PlatformProbe, Probe, kernel_from_dict, kernel_to_dict

EMULATED_KEYS = ("emulated_numerics", "emulated_run")
"""Violations of an emulation (``emulate = [...]``): its outputs differ from the reference's,
or its run failed (an interpreted kernel's out-of-bounds read). Their ``platform`` is the
emulated one; every sentence names it by its label, ``tpu (emulated on cpu)``."""
BASELINE_KEY = "baseline"
"""A count that grew since the committed baseline (``--jaxport-baseline``): ``limit`` and
``found`` the counts there and here, ``what`` the finding (``vendor calls grew 3 -> 5``, made
by :meth:`pytest_jaxport.report.baseline.Change.finding`), ``origin`` the baseline's file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """One broken limit of one check on one platform."""

    check: str
    platform: str
    key: str
    limit: Any
    origin: str
    found: Any
    what: str
    level: str = "lowered"
    kernels: tuple[Kernel, ...] = ()
    details: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    """The formats-and-layout findings behind it (one line each, like ``kernels``)."""

    def headline(self) -> str:
        """The finding first: ``cuda: 3 cudnn calls > 2 (max_library_calls.cudnn, set in
        pyproject.toml [tool.jaxport.budget.cuda]); check 'conv', lowered``."""
        return (
            f"{self.where()}: {self.finding()} ({self.rule()}); check {self.check!r}, {self.level}"
        )

    def where(self) -> str:
        """The platform as the finding names it: ``tpu (emulated on cpu)`` for an emulation's."""
        return emulated_label(self.platform) if self.key in EMULATED_KEYS else self.platform

    def finding(self) -> str:
        """What was found against what was allowed: ``3 cudnn calls > 2``."""
        if self.key == "must_lower" and self.findings:
            return f"fails to {self.what} (the format rules: {_rules_at(self.findings)})"
        if self.key == "must_lower":
            return f"fails to {self.what}"
        if self.key == "forbid_formats":
            return f"uses {self.found}"
        if self.key == "must_trace":
            return "could not be traced here"
        if self.key in ("numerics", "emulated_numerics"):
            return f"{self.found} {self.what}, expected to {self.limit}"
        if self.key == "emulated_run":
            return f"{self.what} {self.found}"
        if self.key == BASELINE_KEY:
            return self.what
        return f"{self.found_text()} > {self.limit_text()}"

    def found_text(self) -> str:
        """``3 cudnn calls``; ``fails to lower`` for ``must_lower``."""
        if self.key in ("must_lower", "must_trace", "emulated_run", BASELINE_KEY):
            return self.finding()
        return f"{self.found} {self.what}".strip()

    def limit_text(self) -> str:
        """The limit as a person reads it: ``2``, ``30.0%``, ``[cpu, tpu]``, ``match cpu``."""
        limit = self.limit
        if _fractional(self.key) and isinstance(limit, int | float):
            return f"{limit:.1%}"
        if isinstance(limit, list | tuple):
            return f"[{', '.join(map(str, limit))}]"
        return f"{limit:g}" if isinstance(limit, float) else str(limit)

    def rule(self) -> str:
        """The budget key and where it was set: ``max_custom_calls, set in pyproject.toml``."""
        if self.key == "must_lower":
            return f"must_lower = {self.limit_text()}, set in {self.origin}"
        if self.key == "must_trace":
            return f"must_trace = true, set in {self.origin}"
        if self.key in ("numerics", "emulated_numerics"):
            return f"numerics, tolerance from {self.origin}"
        if self.key == "forbid_formats":
            return f"forbid_formats = {self.limit_text()}, set in {self.origin}"
        if self.key == "emulated_run":
            return f"emulate, set in {self.origin}"
        if self.key == BASELINE_KEY:
            return f"since the baseline {self.origin}"
        return f"{self.key}, set in {self.origin}"

    def long_repr(self) -> str:
        lines = [self.headline()]
        lines += [f"    {k.describe()}" for k in self.kernels]
        lines += [f"    {f.describe()}" for f in self.findings]
        lines += [f"    {d}" for d in self.details]
        if self.key == "must_lower":  # a rule, not a compile: say where it comes from
            rules = dict.fromkeys((f.platform, f.rule) for f in self.findings)
            lines += [f"    see {rule_source(p, r)}" for p, r in rules]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The violation's fields (no rendered sentence; :meth:`from_dict` restores it)."""
        return {
            "check": self.check,
            "platform": self.platform,
            "key": self.key,
            "limit": list(self.limit) if isinstance(self.limit, tuple) else self.limit,
            "origin": self.origin,
            "found": self.found,
            "what": self.what,
            "level": self.level,
            "kernels": [kernel_to_dict(k) for k in self.kernels],
            "details": list(self.details),
            **({"findings": [f.to_dict() for f in self.findings]} if self.findings else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Violation:
        return cls(
            check=str(data.get("check", "?")),
            platform=str(data.get("platform", "?")),
            key=str(data.get("key", "?")),
            limit=data.get("limit"),
            origin=str(data.get("origin", "?")),
            found=data.get("found"),
            what=str(data.get("what", "")),
            level=str(data.get("level", "lowered")),
            kernels=tuple(kernel_from_dict(k) for k in data.get("kernels") or ()),
            details=tuple(str(d) for d in data.get("details") or ()),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings") or ()),
        )


def _fractional(key: str) -> bool:
    """Keys whose limit is a fraction, shown as a percentage."""
    return key.endswith("_share") or key == "max_padding_waste"


def _rules_at(findings: Sequence[Finding], shown: int = 3) -> str:
    """``complex128-fft-not-compiled x1 at model.py:12, ...``."""
    said = [
        f"{f.rule} x{f.count}" + (f" at {f.location}" if f.location else "")
        for f in findings[:shown]
    ]
    more = f", and {len(findings) - shown} more" if len(findings) > shown else ""
    return ", ".join(said) + more


def ways_out(violations: Sequence[Violation]) -> list[str]:
    """What a person can do about ``violations``, one line per kind of limit they broke
    (said once per test, after the violations): fix the code, raise the limit where it was
    set, or, for a count, let a baseline ratchet it instead.

    >>> ways_out([Violation(check="c", platform="cuda", key="max_custom_calls", limit=0,
    ...                     origin="pyproject.toml [tool.jaxport.budget]", found=1,
    ...                     what="custom call")])[0][:60]
    'to pass: remove the kernels above from the code, or raise ma'
    """
    lines: list[str] = []
    said: set[str] = set()
    for v in violations:
        kind = v.key.partition(".")[0] if v.key.startswith("max_library_calls") else v.key
        if kind in said:
            continue
        said.add(kind)
        if v.key == "must_lower":
            failing = [x.platform for x in violations if x.key == "must_lower"]
            kept = [p for p in v.limit or () if p not in failing]
            lines.append(
                f"to pass: give the code a path that lowers on {', '.join(failing)} "
                "(jax.lax.platform_dependent(..., default=<plain jnp code>)), or narrow "
                f"must_lower (set in {v.origin}) to the platforms it must run on: "
                f"@pytest.mark.portable(must_lower={kept!r})"
            )
        elif v.key == "must_trace":
            lines.append(
                "to pass: run the test where what tracing needs is present, or set "
                f"must_trace = false (set in {v.origin})"
            )
        elif v.key in ("numerics", "emulated_numerics"):
            emulated = v.key == "emulated_numerics"
            lines.append(
                f"to pass: if {emulated_label(v.platform) if emulated else v.platform}'s "
                f"difference is expected, loosen [tool.jaxport.tolerance.{v.platform}.<dtype>] "
                "or the marker's rtol/atol; else fix the code"
                + (" for that platform's path" if emulated else "")
            )
        elif v.key.endswith(("_calls", "_share")) or kind == "max_library_calls":
            lines.append(
                f"to pass: remove the kernels above from the code, or raise {v.key} where it "
                f"was set ({v.origin}; a marker's @pytest.mark.portable({kind}=...) overrides "
                "[tool.jaxport.budget]), or drop the limit and let a baseline keep the count "
                "from growing (--jaxport-baseline=FILE --jaxport-baseline-update)"
            )
        elif v.key == "emulated_run":
            lines.append(
                f"to pass: fix what the emulated run hit (above), or take {v.platform} out of "
                f"emulate (set in {v.origin})"
            )
        elif v.key == "forbid_formats":
            lines.append(
                "to pass: compute in a format the target has (the findings above say where), "
                f"or take it out of forbid_formats (set in {v.origin})"
            )
        elif v.key == BASELINE_KEY:
            grown = [x for x in violations if x.key == BASELINE_KEY and x.found is not None]
            undo = ("take out of the code what grew (the sites above say where)" if grown
                    else "make the code lower there again (the error above)")  # fmt: skip
            lines.append(
                f"to pass: {undo}, or, if the {'growth' if grown else 'change'} is intended, "
                f"record it: pytest --jaxport-baseline={v.origin} --jaxport-baseline-update "
                "(from a full run), and commit the file"
            )
        elif v.key == "max_format_findings":
            lines.append(
                "to pass: change the code at the findings above, accept a rule with "
                f'allow_findings = ["<rule>"], or raise max_format_findings (set in '
                f"{v.origin})"
            )
        else:
            lines.append(
                f"to pass: change the code, or raise {v.key} where it was set ({v.origin})"
            )
    return lines


def failure_text(violations: Sequence[Violation], nodeid: str) -> str:
    """A test's failure for its budget violations and the counts that grew since the
    baseline, said one way: each finding first (the first line is what pytest's one-line
    short summary shows), what it names under it, how many when several, then what to do
    (:func:`ways_out`)."""
    lines = [v.long_repr() for v in violations]
    if len(violations) > 1:
        grown = sum(v.key == BASELINE_KEY for v in violations)
        broken = len(violations) - grown
        said = [f"{broken} portability budget {_plural(broken, 'violation')}"] if broken else []
        said += [f"{grown} {_plural(grown, 'count')} grown since the baseline"] if grown else []
        lines.append(f"({' and '.join(said)} in {nodeid})")
    return "\n".join(lines + ways_out(violations))


def _plural(n: int, word: str) -> str:
    return f"{word}{'' if n == 1 else 's'}"


def _allowed(kernel: Kernel, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(kernel.name, p) for p in patterns)


def evaluate(
    probe: Probe,
    budget_for: Callable[[str], Budget],
    *,
    migrate_to: Sequence[str] = (),
    model: CostModel | None = None,
    emulate_origin: str = "emulate",
) -> list[Violation]:
    """Every violation of ``probe`` against the budget of each platform it was lowered for.

    Counts come from the compiled census where the platform was compiled, else from the
    lowered one; each violation says which (``level``). Rewrite budgets apply per target in
    ``migrate_to``, priced with ``model``. An emulation's outputs must match the reference
    like a present platform's, and its run must not fail (``emulate_origin``: where
    ``emulate`` was set).
    """
    violations: list[Violation] = []
    untraced = probe.untraced
    if untraced is not None:
        must_trace = budget_for(untraced.platform).must_trace
        if must_trace is not None and must_trace.value:
            violations.append(
                Violation(
                    check=probe.name,
                    platform=untraced.platform,
                    key="must_trace",
                    limit=True,
                    origin=must_trace.origin,
                    found="could not be traced here",
                    what="trace",
                    level=f"needs {untraced.needs}",
                    details=(untraced.error,),
                )
            )
    for target in migrate_to:
        violations += _rewrite_violations(probe, budget_for(target), model or CostModel())
    for platform, result in probe.platforms.items():
        budget = budget_for(platform)
        must = budget.must_lower
        if must is not None and platform in must.value:
            failure = result.error or result.execution_error
            if result.needs_hardware and result.census is None:
                failure = None  # unknown here, not a failure: the check warned (see fixture)
            failed: dict[str, Any] | None = None
            if failure is not None:
                stage = "lower" if result.error else "compile or run"
                failed = {"found": f"fails to {stage}", "what": stage, "details": (failure,)}
            elif (
                result.formats is not None
                and result.formats.not_compiling
                and result.compiled is None  # a compile that succeeded here knows better
            ):  # it lowers, but the rules know the target's compiler rejects it
                failed = {"found": "lowers but does not compile", "what": "compile",
                          "level": "lowered (format rules)",
                          "findings": result.formats.not_compiling}  # fmt: skip
            if failed is not None:
                violations.append(
                    Violation(check=probe.name, platform=platform, key="must_lower",
                              limit=must.value, origin=must.origin, **failed)
                )  # fmt: skip
        census = result.budgeted  # the highest level available: compiled, else lowered
        if census is None:
            continue
        custom = census.in_layer("custom")
        if budget.allow_targets is not None:
            custom = tuple(k for k in custom if not _allowed(k, budget.allow_targets.value))
        counted: list[tuple[str, Any, tuple[Kernel, ...], str]] = [
            ("max_custom_calls", budget.max_custom_calls, custom, "custom call"),
            ("max_vendor_calls", budget.max_vendor_calls, census.in_layer("vendor"),
             "vendor call"),
        ]  # fmt: skip
        for library, setting in budget.max_library_calls.items():
            kernels = tuple(k for k in census.in_layer("vendor") if k.library == library)
            counted.append((f"max_library_calls.{library}", setting, kernels, f"{library} call"))
        for key, setting, kernels, noun in counted:
            if setting is None:
                continue
            found = sum(k.count for k in kernels)
            if found > setting.value:
                violations.append(
                    Violation(
                        check=probe.name,
                        platform=platform,
                        key=key,
                        limit=setting.value,
                        origin=setting.origin,
                        found=found,
                        what=_plural(found, noun),
                        level=census.level,
                        kernels=kernels,
                    )
                )
        violations += _share_violations(probe.name, result.runtime_share, budget)
        violations += format_violations(probe.name, result, budget)
        if result.numerics is not None and not result.numerics.ok:
            comparison = result.numerics
            violations.append(
                Violation(
                    check=probe.name,
                    platform=platform,
                    key="numerics",
                    limit=f"match {comparison.reference}",
                    origin=tolerance_origin(comparison),
                    found=len(comparison.mismatches),
                    what=_plural(len(comparison.mismatches), "differing leaf").replace(
                        "leafs", "leaves"
                    ),
                    level="executed",
                    details=tuple(describe(comparison).splitlines()[1:]),
                )
            )
        violations += _emulation_violations(probe.name, result, emulate_origin)
    return violations


def format_violations(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """The formats-and-layout limits of ``budget`` that ``result``'s findings break:
    ``max_format_findings`` (less ``allow_findings``), ``forbid_formats`` and
    ``max_padding_waste`` at the lowered level, ``max_relayouts`` at the compiled one."""
    found: list[Violation] = []
    formats = result.formats

    def violation(setting: Any, key: str, count: Any, what: str, **extra: Any) -> Violation:
        return Violation(check=check, platform=result.platform, key=key, limit=setting.value,
                         origin=setting.origin, found=count, what=what, **extra)  # fmt: skip

    if formats is not None:
        limit = budget.max_format_findings
        if limit is not None:
            allowed = budget.allow_findings.value if budget.allow_findings is not None else ()
            counted = tuple(f for f in formats.findings if f.kind == "format"
                            and not any(fnmatchcase(f.rule, p) for p in allowed))  # fmt: skip
            n = sum(f.count for f in counted)
            if n > limit.value:
                what = _plural(n, "format finding")
                found.append(violation(limit, "max_format_findings", n, what, findings=counted))
        forbidden = budget.forbid_formats
        if forbidden is not None:
            used = [name for name in formats.formats
                    if any(fnmatchcase(name, p) for p in forbidden.value)]  # fmt: skip
            if used:
                found.append(_forbidden(formats, used, violation(forbidden, "forbid_formats",
                                                                 ", ".join(used), "")))  # fmt: skip
        ceiling = budget.max_padding_waste
        if ceiling is not None and formats.padding_waste > ceiling.value:
            padded = sorted(formats.by_rule("tile-padding"), key=lambda f: -f.amount)
            found.append(
                violation(ceiling, "max_padding_waste", f"{formats.padding_waste:.1%}",
                          "of bytes moved are padding", findings=tuple(padded))
            )  # fmt: skip
    compiled = result.compiled_formats
    most = budget.max_relayouts
    if compiled is not None and most is not None and compiled.relayouts > most.value:
        level = f"compiled (deviceless {result.target})" if result.deviceless else "compiled"
        found.append(
            violation(most, "max_relayouts", compiled.relayouts,
                      _plural(compiled.relayouts, "relayout"), level=level,
                      findings=compiled.by_rule("inserted-relayout"))
        )  # fmt: skip
    return found


def _forbidden(formats: FormatCensus, used: Sequence[str], base: Violation) -> Violation:
    """``base`` with the findings at the forbidden formats' lines, or how many ops use them
    where no rule flags them (an op without a kept location has no line)."""
    findings = tuple(f for f in formats.findings if set(f.formats) & set(used))
    if findings:
        return replace(base, findings=findings)
    ops = sum(formats.formats[name] for name in used)
    return replace(base, details=(f"in {ops} {'op' if ops == 1 else 'ops'} (no rule flags them "
                                  "on this device: no line kept)",))  # fmt: skip


def _emulation_violations(check: str, result: PlatformProbe, origin: str) -> list[Violation]:
    """An emulation whose outputs differ from the reference's, or whose run failed; one
    that could not run here (a kernel this JAX cannot interpret) is a note, not a failure."""
    emulation = result.emulated
    if emulation is None:
        return []
    comparison = result.emulated_numerics
    if emulation.error is not None:
        return [
            Violation(
                check=check,
                platform=result.platform,
                key="emulated_run",
                limit=True,
                origin=origin,
                found="failed",
                what="the emulated run",
                level="emulated",
                details=(emulation.error, *emulation_lines(emulation)[:-1]),
            )
        ]
    if comparison is None or comparison.ok:
        return []
    return [
        Violation(
            check=check,
            platform=result.platform,
            key="emulated_numerics",
            limit=f"match {comparison.reference}",
            origin=tolerance_origin(comparison),
            found=len(comparison.mismatches),
            what=_plural(len(comparison.mismatches), "differing leaf").replace("leafs", "leaves"),
            level="emulated",
            details=tuple(divergence_message(emulation, describe(comparison)).splitlines()[1:]),
        )
    ]


def _share_violations(check: str, share: RuntimeShare | None, budget: Budget) -> list[Violation]:
    if share is None:
        return []
    found = []
    for key, layer in (("max_vendor_share", "vendor"), ("max_custom_share", "custom")):
        setting = getattr(budget, key)
        value = share.layers.get(layer, 0.0)
        if setting is not None and value > setting.value:
            libraries = ", ".join(f"{lib} {f:.0%}" for lib, f in share.libraries.items())
            found.append(
                Violation(
                    check=check,
                    platform=budget.platform,
                    key=key,
                    limit=setting.value,
                    origin=setting.origin,
                    found=f"{value:.1%}",
                    what=f"of the run time in {layer} kernels",
                    level=f"{share.basis} runtime share",
                    details=(f"libraries: {libraries}",) if libraries and layer == "vendor" else (),
                )
            )
    return found


def _rewrite_violations(probe: Probe, budget: Budget, model: CostModel) -> list[Violation]:
    if budget.max_kernels_to_rewrite is None and budget.max_rewrite_days is None:
        return []
    items = probe.rewrite_items(budget.platform)
    formats = probe.format_items(budget.platform)
    if not items and not formats:
        return []
    # Per check: the kernels' own days; the per-target fixed cost belongs to the suite.
    result = estimate(
        budget.platform, items or (), model=replace(model, fixed=0.0), format_items=formats
    )
    return rewrite_violations(
        probe.name,
        budget,
        kernels=result.kernels_to_rewrite,
        days=result.days,
        details=tuple(i.describe() for i in result.items)
        + tuple(i.describe() for i in result.format_items),
    )


def rewrite_violations(
    check: str, budget: Budget, *, kernels: int, days: float, details: tuple[str, ...]
) -> list[Violation]:
    """``max_kernels_to_rewrite`` and ``max_rewrite_days`` of ``budget`` (its platform is the
    target) against an estimate of ``kernels`` and ``days``; ``details`` lists the items."""
    target = budget.platform
    found: list[Violation] = []
    limit = budget.max_kernels_to_rewrite
    if limit is not None and kernels > limit.value:
        found.append(
            Violation(
                check=check,
                platform=target,
                key="max_kernels_to_rewrite",
                limit=limit.value,
                origin=limit.origin,
                found=kernels,
                what=f"{_plural(kernels, 'kernel')} to rewrite moving off cuda",
                level="from the cuda census",
                details=details,
            )
        )
    most = budget.max_rewrite_days
    if most is not None and days > most.value:
        found.append(
            Violation(
                check=check,
                platform=target,
                key="max_rewrite_days",
                limit=most.value,
                origin=most.origin,
                found=f"{days:g}",
                what="engineering days to move off cuda",
                level="cost model",
                details=details,
            )
        )
    return found
