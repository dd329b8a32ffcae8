"""The budget's keys, each with its judge and its way out, and the violations they make (pure).

Every budget key is declared once, in :data:`KEYS` (:class:`BudgetKey`): its name, the kind
of value it takes, what it limits, whether the marker takes it, how a check is judged
against it and what a person can do about a violation. The configuration's keys and their
validation, the marker's signature and its did-you-mean (:mod:`pytest_jaxport.model.config`),
:class:`Budget`'s fields, the evaluation's checks (:mod:`pytest_jaxport.model.evaluation`)
and the failure's ways out (:mod:`pytest_jaxport.model.failure`) are read from that table;
adding a key is one entry there (and its judge, below it) plus its test.

A message leads with the finding, so pytest's one-line short summary shows it::

    cuda: 1 custom call > 0 (max_custom_calls, set in pyproject.toml [tool.jaxport.budget]);
    check 'attention', lowered
        __gpu$xla.gpu.triton (pallas-triton) at src/kernels.py:12

(one line in the terminal). The report stores each violation's fields, never the sentence:
:meth:`Violation.to_dict` / :meth:`Violation.from_dict`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Generic, Literal, TypeVar

from pytest_jaxport.model.census import CompiledMemory, Kernel
from pytest_jaxport.model.classification import Layer
from pytest_jaxport.model.emulation import (
    emulated_label,
)
from pytest_jaxport.model.findings import LINES_KEPT, Finding, FormatCensus
from pytest_jaxport.model.format_rules import rule_source
from pytest_jaxport.model.memory import MemoryLimit, breakdown_text, gib_text
from pytest_jaxport.model.platforms import DEFAULT_HOME, compiler_decides
from pytest_jaxport.model.probe import (
    PlatformProbe,
    Probe,
    kernel_from_dict,
    kernel_to_dict,
)

T = TypeVar("T")

NUMERICS_KEYS = ("numerics", "emulated_numerics")
"""Outputs that differ from the reference's beyond the tolerance (executed, or emulated): a
test fails for them like for a broken limit, but they are numerics, not a budget: every
format names them so (a mismatch, with its worst error), apart from budget violations."""
MAY_DIFFER_KEY = "emulated_may_differ"
"""An emulation that matched, but *may differ* on the chip (``may_differ = "fail"``): ``what``
the finding (``may differ on tpu: tanh at m.py:12 is within 1,336 ulp on TPU v5 lite ...``),
``limit`` the setting's value, ``origin`` where it was set."""
EMULATED_KEYS = ("emulated_numerics", "emulated_run", MAY_DIFFER_KEY)
"""Violations of an emulation (``emulate = [...]``): its outputs differ from the reference's,
its run failed (an interpreted kernel's out-of-bounds read), or it may differ on the chip.
Their ``platform`` is the emulated one; every sentence names it by its label, ``tpu
(emulated on cpu)``."""
BASELINE_KEY = "baseline"
"""A count that grew since the committed baseline (``--jaxport-baseline``): ``limit`` and
``found`` the counts there and here, ``what`` the finding (``vendor calls grew 3 -> 5``, made
by :meth:`pytest_jaxport.report.baseline.Change.finding`), ``origin`` the baseline's file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting(Generic[T]):
    """A configured value and where it was set (``pyproject.toml [tool.jaxport.budget]``)."""

    value: T
    origin: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """The limits that apply to one check on one platform; ``None`` means no limit.

    One field per key of :data:`KEYS`, in its order (what each limits is said there; a test
    holds the two equal): resolved by :meth:`pytest_jaxport.model.config.Resolved.budget`.
    """

    platform: str
    max_custom_calls: Setting[int] | None = None
    max_vendor_calls: Setting[int] | None = None
    max_library_calls: Mapping[str, Setting[int]] = field(default_factory=dict)
    must_lower: Setting[tuple[str, ...]] | None = None
    must_trace: Setting[bool] | None = None
    allow_targets: Setting[tuple[str, ...]] | None = None
    max_vendor_share: Setting[float] | None = None
    max_custom_share: Setting[float] | None = None
    max_kernels_to_rewrite: Setting[int] | None = None
    max_rewrite_days: Setting[float] | None = None
    max_tooling_assumptions: Setting[int] | None = None
    max_format_findings: Setting[int] | None = None
    forbid_formats: Setting[tuple[str, ...]] | None = None
    max_padding_waste: Setting[float] | None = None
    max_relayouts: Setting[int] | None = None
    allow_findings: Setting[tuple[str, ...]] | None = None
    max_device_memory: Setting[MemoryLimit] | None = None

    def is_set(self, key: str) -> bool:
        """Whether the declared key ``key`` sets a limit here (a library limit for
        ``max_library_calls``)."""
        return bool(getattr(self, key))


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

    @property
    def kind(self) -> Kind | None:
        """The declared kind of its budget key (:data:`KEYS`); ``None`` for what is no
        budget key (numerics, the emulation, the baseline)."""
        declared = DECLARED.get(self.key.partition(".")[0])
        return None if declared is None else declared.kind

    def finding(self) -> str:
        """What was found against what was allowed: ``3 cudnn calls > 2``; a list key
        broken says what fails (``fails to lower``) or what is used, a flag what happened."""
        kind = self.kind
        if kind == "platforms" and self.findings:  # must_lower
            return f"fails to {self.what} (the format rules: {_rules_at(self.findings)})"
        if kind == "platforms":
            return f"fails to {self.what}"
        if kind == "formats":  # forbid_formats
            return f"uses {self.found}"
        if kind == "flag":  # must_trace
            return "could not be traced here"
        if kind == "memory":  # max_device_memory: planned against allowed, said whole
            return self.what
        if self.key in NUMERICS_KEYS:
            return f"{self.found} {self.what}, expected to {self.limit}"
        if self.key == "emulated_run":
            return f"{self.what} {self.found}"
        if self.key in (BASELINE_KEY, MAY_DIFFER_KEY) or self.found is None:
            return self.what
        return f"{self.found_text()} > {self.limit_text()}"

    def found_text(self) -> str:
        """``3 cudnn calls``; ``fails to lower`` for ``must_lower``."""
        if self.kind in ("platforms", "flag", "memory") or self.key in (
            "emulated_run",
            BASELINE_KEY,
            MAY_DIFFER_KEY,
        ):
            return self.finding()
        if self.found is None:
            return self.what
        return f"{self.found} {self.what}".strip()

    def limit_text(self) -> str:
        """The limit as a person reads it: ``2``, ``30.0%``, ``[cpu, tpu]``, ``match cpu``."""
        limit = self.limit
        if self.kind == "memory":  # as written: 0.8 (of the capacity), "12 GiB"
            return str(limit)
        if _fractional(self.key) and isinstance(limit, int | float):
            return f"{limit:.1%}"
        if isinstance(limit, list | tuple):
            return f"[{', '.join(map(str, limit))}]"
        return f"{limit:g}" if isinstance(limit, float) else str(limit)

    def rule(self) -> str:
        """The budget key and where it was set: ``max_custom_calls, set in pyproject.toml``;
        with its value where that is no number (``must_lower = [cuda], set in ...``)."""
        declared = DECLARED.get(self.key)
        if declared is not None and declared.kind == "flag":
            return f"{self.key} = {str(self.limit).lower()}, set in {self.origin}"
        if declared is not None and declared.kind in _LISTS:
            return f"{self.key} = {self.limit_text()}, set in {self.origin}"
        if declared is not None and declared.kind == "memory":
            shown = f'"{self.limit}"' if isinstance(self.limit, str) else self.limit_text()
            return f"{self.key} = {shown}, set in {self.origin}"
        if self.key in NUMERICS_KEYS:
            return f"numerics, tolerance from {self.origin}"
        if self.key == "emulated_run":
            return f"emulate, set in {self.origin}"
        if self.key == MAY_DIFFER_KEY:
            return f'may_differ = "{self.limit}", set in {self.origin}'
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


def numerics_tally(violations: Iterable[Violation]) -> tuple[int, int]:
    """``(numerics mismatches, checks that may differ)`` among ``violations``: what fails a
    test without being a budget violation, counted once for every place that says how many
    budget violations there are (the headline of every format, ``jaxport merge``'s verdict).

    >>> found = [Violation(check="f", platform="tpu", key=k, limit=0, origin="", found=1,
    ...                    what="") for k in ("numerics", MAY_DIFFER_KEY, "max_vendor_calls")]
    >>> numerics_tally(found)
    (1, 1)
    """
    mismatches = differ = 0
    for violation in violations:
        mismatches += violation.key in NUMERICS_KEYS
        differ += violation.key == MAY_DIFFER_KEY
    return mismatches, differ


def _fractional(key: str) -> bool:
    """Keys whose limit is a fraction, shown as a percentage (the kind ``fraction``)."""
    return key in _FRACTIONS


def _rules_at(findings: Sequence[Finding], shown: int = 3) -> str:
    """``complex128-fft-not-compiled x1 at model.py:12, ...``."""
    said = [
        f"{f.rule} x{f.count}" + (f" at {f.location}" if f.location else "")
        for f in findings[:shown]
    ]
    more = f", and {len(findings) - shown} more" if len(findings) > shown else ""
    return ", ".join(said) + more


def noun_for(n: int, word: str) -> str:
    """``word`` for one, its plural for any other count: ``custom call``, ``custom calls``."""
    return f"{word}{'' if n == 1 else 's'}"


def _allowed(kernel: Kernel, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(kernel.name, p) for p in patterns)


# -- the declaration's types ----------------------------------------------------------------

Kind = Literal["count", "fraction", "days", "flag", "platforms", "globs", "formats", "rules",
               "libraries", "memory"]  # fmt: skip
"""What a budget key's value is; :mod:`pytest_jaxport.model.config` holds one validator and
one marker annotation per kind: ``count`` a non-negative integer, ``fraction`` a number from
0 to 1, ``days`` a non-negative number of days, ``flag`` true or false, ``platforms`` a list
of platforms, ``globs`` a list of glob patterns, ``formats`` and ``rules`` lists of format
and rule names (globs), ``libraries`` a table of library = count, ``memory`` a fraction of
the device's capacity or a size with its unit
(:class:`~pytest_jaxport.model.memory.MemoryLimit`)."""

PlatformJudge = Callable[[str, PlatformProbe, Budget], list[Violation]]
"""``(check's name, its result on one platform, that platform's budget) -> violations``."""
CheckJudge = Callable[[Probe, Callable[[str], Budget]], list[Violation]]
"""``(the check, the budget of each platform) -> violations``."""
TargetJudge = Callable[[str, Budget, "Rewrite"], list[Violation]]
"""``(check's name, the target's budget, the estimate of moving there) -> violations``."""
WayOut = Callable[[Violation, Sequence[Violation]], str]
"""``(the violation, every violation of the test) -> "to pass: ..."``."""


@dataclass(frozen=True, slots=True)
class OnPlatform:
    """Judged per check, per platform it lowered for, by ``judge``; where ``needs_census``,
    only where the platform has a census (lowered, or compiled)."""

    judge: PlatformJudge
    needs_census: bool = True


@dataclass(frozen=True, slots=True)
class OnCheck:
    """Judged once per check, by ``judge``, whatever it lowered for."""

    judge: CheckJudge


@dataclass(frozen=True, slots=True)
class OnTarget:
    """Judged per target of ``migrate_to``, on the estimate of moving there from the home
    platform (per check by :func:`~pytest_jaxport.model.evaluation.evaluate`, for the suite by
    :func:`~pytest_jaxport.model.evaluation.rewrite_violations`)."""

    judge: TargetJudge


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """Not judged by :func:`~pytest_jaxport.model.evaluation.evaluate`: ``where`` says what
    reads the key instead."""

    where: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetKey:
    """One budget key, declared once: everything else reads it from here.

    >>> [k.name for k in KEYS if k.kind == "fraction"]
    ['max_vendor_share', 'max_custom_share', 'max_padding_waste']
    """

    name: str
    kind: Kind
    doc: str
    """What it limits, as the reference says it."""
    judged: OnPlatform | OnCheck | OnTarget | Elsewhere
    ratchet: str | None = None
    """The metric a baseline (``--jaxport-baseline``; ``report/baseline.py``'s ``METRICS``
    are these, read from here) keeps the same number in, so it cannot grow where no limit
    is set (``library.`` for ``max_library_calls``: one metric per library); ``None`` where
    no baseline counts it."""
    ratchet_also: tuple[str, ...] = ()
    """The numbers a baseline keeps beside :attr:`ratchet`, counted from the same findings
    (``layout_findings`` beside ``format_findings``): their growth fails like the key's."""
    way_out: WayOut | None = None
    """What a person can do about a violation of it (``to pass: ...``); where ``None``:
    change the code, or raise the limit where it was set."""
    project_only: str | None = None
    """Why the key is set in ``[tool.jaxport.budget]`` only (not per platform, not in the
    marker, not in the audit's ``fail_on``); ``None`` where it is set anywhere."""

    @property
    def marker(self) -> bool:
        """Whether ``@pytest.mark.portable(...)`` takes it."""
        return self.project_only is None


# -- the ways out: what a person can do about a broken key (said once per key and test) ---


def change_or_raise(v: Violation, violations: Sequence[Violation]) -> str:
    """The way out of a key without one of its own: change the code, or raise the limit."""
    return f"to pass: change the code, or raise {v.key} where it was set ({v.origin})"


def _lower_there(v: Violation, violations: Sequence[Violation]) -> str:
    failing = [x.platform for x in violations if x.key == "must_lower"]
    kept = [p for p in v.limit or () if p not in failing]
    return (
        f"to pass: give the code a path that lowers on {', '.join(failing)} "
        "(jax.lax.platform_dependent(..., default=<plain jnp code>)), or narrow "
        f"must_lower (set in {v.origin}) to the platforms it must run on: "
        f"@pytest.mark.portable(must_lower={kept!r})"
    )


def _trace_where_present(v: Violation, violations: Sequence[Violation]) -> str:
    return (
        "to pass: run the test where what tracing needs is present, or set "
        f"must_trace = false (set in {v.origin})"
    )


def _fewer_to_rewrite(v: Violation, violations: Sequence[Violation]) -> str:
    """A rewrite key: change the code or raise the limit; where nothing was counted (the
    target or the home platform not lowered), lower for it or drop the limit."""
    if v.found is None:
        return (
            "to pass: lower for the platforms not lowered ([tool.jaxport] platforms, "
            f"--jaxport-platforms, a marker's platforms), or drop {v.key} (set in {v.origin}): "
            "a limit on what was never counted cannot pass"
        )
    return change_or_raise(v, violations)


def _fewer_kernels(v: Violation, violations: Sequence[Violation]) -> str:
    key = v.key.partition(".")[0]
    return (
        f"to pass: remove the kernels above from the code, or raise {v.key} where it "
        f"was set ({v.origin}; a marker's @pytest.mark.portable({key}=...) overrides "
        "[tool.jaxport.budget]), or drop the limit and let a baseline keep the count "
        "from growing (--jaxport-baseline=FILE --jaxport-baseline-update)"
    )


def _another_format(v: Violation, violations: Sequence[Violation]) -> str:
    return (
        "to pass: compute in a format the target has (the findings above say where), "
        f"or take it out of forbid_formats (set in {v.origin})"
    )


def _fewer_findings(v: Violation, violations: Sequence[Violation]) -> str:
    return (
        "to pass: change the code at the findings above, accept a rule with "
        f'allow_findings = ["<rule>"], or raise max_format_findings (set in '
        f"{v.origin})"
    )


# -- the judges: how a check is held to each key --------------------------------------------


def _calls(
    check: str, platform: str, key: str, setting: Setting[int] | None,
    kernels: tuple[Kernel, ...], noun: str, level: str,
) -> list[Violation]:  # fmt: skip
    """``found > limit`` for a count of kernel calls."""
    if setting is None:
        return []
    found = sum(k.count for k in kernels)
    if found <= setting.value:
        return []
    return [Violation(check=check, platform=platform, key=key, limit=setting.value,
                      origin=setting.origin, found=found, what=noun_for(found, noun),
                      level=level, kernels=kernels)]  # fmt: skip


def _layer_calls(layer: Layer, key: str) -> PlatformJudge:
    """The judge of ``max_<layer>_calls``: the calls of ``layer``'s kernels (custom calls
    less those ``allow_targets`` allows)."""

    def judge(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
        census = result.budgeted
        if census is None:
            return []
        kernels = census.in_layer(layer)
        if layer == "custom" and budget.allow_targets is not None:
            kernels = tuple(k for k in kernels if not _allowed(k, budget.allow_targets.value))
        setting: Setting[int] | None = getattr(budget, key)
        return _calls(check, budget.platform, key, setting, kernels, f"{layer} call",
                      census.level)  # fmt: skip

    return judge


def _library_calls(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """``max_library_calls``: each library's calls against its own limit."""
    census = result.budgeted
    if census is None:
        return []
    found: list[Violation] = []
    for library, setting in budget.max_library_calls.items():
        kernels = tuple(k for k in census.in_layer("vendor") if k.library == library)
        found += _calls(check, budget.platform, f"max_library_calls.{library}", setting,
                        kernels, f"{library} call", census.level)  # fmt: skip
    return found


def _must_lower(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """``must_lower``: a platform it names failed to lower, compile or run (compiled where
    its compile without the device is its device's own: tpu's), or lowers but the format
    rules know its compiler rejects the program."""
    must = budget.must_lower
    if must is None or budget.platform not in must.value:
        return []
    refused = result.compile_error if compiler_decides(result.platform) else None
    failure = result.error or result.execution_error or refused
    if result.needs_hardware and result.census is None:
        failure = None  # unknown here, not a failure: the check warned (see fixture)
    if failure is not None:
        stage = (
            "lower" if result.error
            else "compile" if failure is refused
            else "compile or run"
        )  # fmt: skip
        level = "compiled" if failure is refused else "lowered"
        memory = result.memory
        if failure is refused and memory is not None and memory.out_of_memory is not None:
            stage = f"compile: {memory.headline()}"  # the refusal's reason, first
        return [Violation(check=check, platform=budget.platform, key="must_lower",
                          limit=must.value, origin=must.origin, found=f"fails to {stage}",
                          what=stage, level=level, details=(failure,))]  # fmt: skip
    if (
        result.formats is not None
        and result.formats.not_compiling
        and result.compiled is None  # a compile that succeeded here knows better
    ):  # it lowers, but the rules know the target's compiler rejects it
        return [Violation(check=check, platform=budget.platform, key="must_lower",
                          limit=must.value, origin=must.origin,
                          found="lowers but does not compile", what="compile",
                          level="lowered (format rules)",
                          findings=result.formats.not_compiling)]  # fmt: skip
    return []


def _must_trace(probe: Probe, budget_for: Callable[[str], Budget]) -> list[Violation]:
    """``must_trace``: the check could not be traced here, on the platform that needed it."""
    untraced = probe.untraced
    if untraced is None:
        return []
    must_trace = budget_for(untraced.platform).must_trace
    if must_trace is None or not must_trace.value:
        return []
    return [Violation(check=probe.name, platform=untraced.platform, key="must_trace",
                      limit=True, origin=must_trace.origin, found="could not be traced here",
                      what="trace", level=f"needs {untraced.needs}",
                      details=(untraced.error,))]  # fmt: skip


def _runtime_share(layer: Layer, key: str) -> PlatformJudge:
    """The judge of ``max_<layer>_share``: the share of the run time in ``layer``'s kernels."""

    def judge(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
        share = result.runtime_share
        setting: Setting[float] | None = getattr(budget, key)
        if share is None or setting is None:
            return []
        value = share.layers.get(layer, 0.0)
        if value <= setting.value:
            return []
        libraries = ", ".join(f"{lib} {f:.0%}" for lib, f in share.libraries.items())
        return [Violation(check=check, platform=budget.platform, key=key, limit=setting.value,
                          origin=setting.origin, found=f"{value:.1%}",
                          what=f"of the run time in {layer} kernels",
                          level=f"{share.basis} runtime share",
                          details=(f"libraries: {libraries}",)
                          if libraries and layer == "vendor" else ())]  # fmt: skip

    return judge


def _format_findings(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """``max_format_findings``: call-weighted findings of kind ``format`` (lowered), less
    those ``allow_findings`` matches."""
    formats, limit = result.formats, budget.max_format_findings
    if formats is None or limit is None:
        return []
    allowed = budget.allow_findings.value if budget.allow_findings is not None else ()
    counted = tuple(f for f in formats.findings if f.kind == "format"
                    and not any(fnmatchcase(f.rule, p) for p in allowed))  # fmt: skip
    n = sum(f.count for f in counted)
    if n <= limit.value:
        return []
    return [Violation(check=check, platform=result.platform, key="max_format_findings",
                      limit=limit.value, origin=limit.origin, found=n,
                      what=noun_for(n, "format finding"), findings=counted)]  # fmt: skip


def _forbid_formats(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """``forbid_formats``: an op of the lowered program uses a forbidden format."""
    formats, forbidden = result.formats, budget.forbid_formats
    if formats is None or forbidden is None:
        return []
    used = [name for name in formats.formats if any(fnmatchcase(name, p) for p in forbidden.value)]
    if not used:
        return []
    base = Violation(check=check, platform=result.platform, key="forbid_formats",
                     limit=forbidden.value, origin=forbidden.origin, found=", ".join(used),
                     what="")  # fmt: skip
    return [_forbidden(formats, used, base)]


def _padding_waste(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """``max_padding_waste``: the share of bytes moved that is tile padding, in the layouts
    the compiler chose where it compiled the program, else the lowered model's."""
    formats, ceiling = result.padding_formats, budget.max_padding_waste
    if formats is None or ceiling is None or formats.padding_waste <= ceiling.value:
        return []
    padded = sorted(formats.by_rule("tile-padding"), key=lambda f: -f.amount)
    level = "lowered (layout model)"
    if formats.level == "compiled":
        level = f"compiled (deviceless {result.target})" if result.deviceless else "compiled"
    return [Violation(check=check, platform=result.platform, key="max_padding_waste",
                      limit=ceiling.value, origin=ceiling.origin,
                      found=f"{formats.padding_waste:.1%}", what="of bytes moved are padding",
                      level=level, findings=tuple(padded))]  # fmt: skip


def _relayouts(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """``max_relayouts``: transposes and copies XLA inserted around library calls
    (compiled)."""
    compiled, most = result.compiled_formats, budget.max_relayouts
    if compiled is None or most is None or compiled.relayouts <= most.value:
        return []
    level = f"compiled (deviceless {result.target})" if result.deviceless else "compiled"
    return [Violation(check=check, platform=result.platform, key="max_relayouts",
                      limit=most.value, origin=most.origin, found=compiled.relayouts,
                      what=noun_for(compiled.relayouts, "relayout"), level=level,
                      findings=compiled.by_rule("inserted-relayout"))]  # fmt: skip


def _device_memory(check: str, result: PlatformProbe, budget: Budget) -> list[Violation]:
    """``max_device_memory``: the memory the compiler planned per device (or said the check
    needs, where it refused it) against the limit: a size, or a fraction of the device's
    capacity (where the capacity is unknown, a fraction cannot be judged: it fails, saying
    so). Judged where a compiler planned the memory; a platform not compiled has no number."""
    setting, memory = budget.max_device_memory, result.memory
    if setting is None or memory is None or memory.level != "compiled":
        return []
    needed = memory.needed_bytes
    if needed is None:  # the compiler gave no count: nothing measured to judge
        return []
    limit = setting.value
    allowed = limit.allowed(memory.capacity_bytes)
    level = f"compiled (deviceless {memory.slice or memory.device})" if memory.deviceless \
        else "compiled"  # fmt: skip
    base = Violation(check=check, platform=result.platform, key="max_device_memory",
                     limit=limit.to_json(), origin=setting.origin, found=None, what="",
                     level=level)  # fmt: skip
    if allowed is None:
        return [replace(base, what=(
            f"a fraction ({limit.written}) of an unknown capacity: {memory.where}'s capacity "
            f"is unknown ({memory.capacity_source or 'no device description gives it'}), so "
            f"{gib_text(needed)} planned cannot be judged against it"))]  # fmt: skip
    if needed <= allowed:
        return []
    refused = memory.out_of_memory
    planned = (
        f"needs {refused.needs_text} (the compiler's figure; it refused the program)"
        if refused is not None and memory.peak_bytes is None
        else f"{gib_text(needed)} planned"
    )
    return [replace(base, found=needed, what=(
        f"{planned} > {limit.text(memory.capacity_bytes)} allowed on {memory.where}"),
        details=_memory_details(memory.breakdown, needed, allowed))]  # fmt: skip


def _memory_details(breakdown: CompiledMemory | None, needed: int, allowed: int) -> tuple[str, ...]:
    """The bytes behind a ``max_device_memory`` violation: planned, allowed, and the
    compiler's count."""
    said = f"planned {needed:,} bytes per device, allowed {allowed:,}"
    if breakdown is None:
        return (said,)
    return (
        said,
        breakdown_text(breakdown),
    )


def _smaller_plan(v: Violation, violations: Sequence[Violation]) -> str:
    """The way out of ``max_device_memory``."""
    if v.found is None:
        return (
            f'to pass: set max_device_memory as a size ("12 GiB") where the capacity is '
            f"unknown ({v.origin} sets a fraction), or in a table of a platform whose device's "
            "capacity is known ([tool.jaxport.budget.tpu])"
        )
    return (
        "to pass: plan less memory per device (shard the arguments over a slice: devices.tpu "
        '= "v5e:2x2"; donate arguments; jax.checkpoint), or raise max_device_memory where it '
        f"was set ({v.origin})"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Rewrite:
    """The estimate of moving off the home platform to one target that the rewrite keys
    judge: per check (its kernels' own days) or for the suite (the audit's)."""

    kernels: int
    days: float
    details: tuple[str, ...]
    """The estimate's items, one line each."""
    home: str = DEFAULT_HOME
    """The platform moved off (``[tool.jaxport] home``)."""
    not_lowered: tuple[str, ...] = ()
    """The platforms (the target, or :attr:`home`) not lowered: nothing was counted, and a
    limit on the count cannot pass (:func:`_not_counted`)."""


def _not_counted(check: str, budget: Budget, key: str, rewrite: Rewrite) -> list[Violation]:
    """A rewrite key (``key``) of ``budget`` on a target whose move was never counted (it, or
    the home platform, not lowered): it fails, saying why; ``[]`` where it was counted or
    ``key`` sets no limit."""
    limit = getattr(budget, key)
    if limit is None or not rewrite.not_lowered:
        return []
    what = "kernels to rewrite" if key == "max_kernels_to_rewrite" else "engineering days"
    return [Violation(check=check, platform=budget.platform, key=key, limit=limit.value,
                      origin=limit.origin, found=None,
                      what=f"{what} moving off {rewrite.home} not counted: "
                      f"{' and '.join(rewrite.not_lowered)} not lowered",
                      level="not lowered")]  # fmt: skip


def _kernels_to_rewrite(check: str, budget: Budget, rewrite: Rewrite) -> list[Violation]:
    """``max_kernels_to_rewrite``: the kernels a move to the target rewrites."""
    if rewrite.not_lowered:
        return _not_counted(check, budget, "max_kernels_to_rewrite", rewrite)
    limit = budget.max_kernels_to_rewrite
    if limit is None or rewrite.kernels <= limit.value:
        return []
    return [Violation(check=check, platform=budget.platform, key="max_kernels_to_rewrite",
                      limit=limit.value, origin=limit.origin, found=rewrite.kernels,
                      what=f"{noun_for(rewrite.kernels, 'kernel')} to rewrite moving off "
                      f"{rewrite.home}", level=f"from the {rewrite.home} census",
                      details=rewrite.details)]  # fmt: skip


def _rewrite_days(check: str, budget: Budget, rewrite: Rewrite) -> list[Violation]:
    """``max_rewrite_days``: the engineering days a move to the target costs."""
    if rewrite.not_lowered:
        return _not_counted(check, budget, "max_rewrite_days", rewrite)
    most = budget.max_rewrite_days
    if most is None or rewrite.days <= most.value:
        return []
    return [Violation(check=check, platform=budget.platform, key="max_rewrite_days",
                      limit=most.value, origin=most.origin, found=f"{rewrite.days:g}",
                      what=f"engineering days to move off {rewrite.home}", level="cost model",
                      details=rewrite.details)]  # fmt: skip


# -- the declaration ------------------------------------------------------------------------

KEYS: tuple[BudgetKey, ...] = (
    BudgetKey(
        name="max_custom_calls",
        kind="count",
        judged=OnPlatform(_layer_calls("custom", "max_custom_calls")),
        doc="Custom calls (Pallas, Triton, Mosaic, a handwritten kernel), less allow_targets.",
        way_out=_fewer_kernels,
        ratchet="custom",
    ),
    BudgetKey(
        name="max_vendor_calls",
        kind="count",
        judged=OnPlatform(_layer_calls("vendor", "max_vendor_calls")),
        doc="Calls into vendor libraries (cuDNN, cuBLAS, NCCL, ...).",
        way_out=_fewer_kernels,
        ratchet="vendor",
    ),
    BudgetKey(
        name="max_library_calls",
        kind="libraries",
        judged=OnPlatform(_library_calls),
        doc="Calls into each vendor library named ({ cudnn = 2 }), each against its limit.",
        way_out=_fewer_kernels,
        ratchet="library.",
    ),
    BudgetKey(
        name="must_lower",
        kind="platforms",
        judged=OnPlatform(_must_lower, needs_census=False),
        doc="Platforms the code must lower (and, where present, compile and run) for.",
        way_out=_lower_there,
    ),
    BudgetKey(
        name="must_trace",
        kind="flag",
        judged=OnCheck(_must_trace),
        doc="Fail a check JAX cannot trace here because this machine lacks what it needs "
        '(cuDNN for implementation="cudnn" attention), on the platform that needs it; by '
        "default such a check is reported as not traced and fails nothing.",
        way_out=_trace_where_present,
    ),
    BudgetKey(
        name="allow_targets",
        kind="globs",
        judged=Elsewhere("max_custom_calls leaves them out"),
        doc="Custom-call targets (globs) max_custom_calls leaves out.",
    ),
    BudgetKey(
        name="max_vendor_share",
        kind="fraction",
        judged=OnPlatform(_runtime_share("vendor", "max_vendor_share")),
        doc="The share of the run time in vendor kernels.",
        way_out=_fewer_kernels,
    ),
    BudgetKey(
        name="max_custom_share",
        kind="fraction",
        judged=OnPlatform(_runtime_share("custom", "max_custom_share")),
        doc="The share of the run time in custom kernels.",
        way_out=_fewer_kernels,
    ),
    BudgetKey(
        name="max_kernels_to_rewrite",
        kind="count",
        judged=OnTarget(_kernels_to_rewrite),
        doc="For the target this budget's platform is: kernels to rewrite moving off the home "
        "platform.",
        way_out=_fewer_to_rewrite,
    ),
    BudgetKey(
        name="max_rewrite_days",
        kind="days",
        judged=OnTarget(_rewrite_days),
        doc="For the target this budget's platform is: engineering days moving off the home "
        "platform.",
        way_out=_fewer_to_rewrite,
    ),
    BudgetKey(
        name="max_tooling_assumptions",
        kind="count",
        judged=Elsewhere("the session, once per run, on the project scan's findings"),
        project_only="the scan covers the whole project",
        doc="NVIDIA-bound tooling assumptions the project scan finds.",
    ),
    BudgetKey(
        name="max_format_findings",
        kind="count",
        judged=OnPlatform(_format_findings),
        doc="Call-weighted findings of kind format not matched by allow_findings.",
        way_out=_fewer_findings,
        ratchet="format_findings",
        ratchet_also=("layout_findings", "not_compiling"),
    ),
    BudgetKey(
        name="forbid_formats",
        kind="formats",
        judged=OnPlatform(_forbid_formats),
        doc="Formats (JAX names) no op may use on this platform, flagged by a rule or not.",
        way_out=_another_format,
    ),
    BudgetKey(
        name="max_padding_waste",
        kind="fraction",
        judged=OnPlatform(_padding_waste),
        doc="The share of bytes moved that is tile padding (tpu): in the layouts the "
        "compiler chose where tpu was compiled, else in the lowered model's.",
        ratchet="padding_waste",
    ),
    BudgetKey(
        name="max_relayouts",
        kind="count",
        judged=OnPlatform(_relayouts),
        doc="Transposes and copies XLA inserted around library calls (compiled level).",
        ratchet="relayouts",
        ratchet_also=("relayout_bytes",),
    ),
    BudgetKey(
        name="allow_findings",
        kind="rules",
        judged=Elsewhere("max_format_findings leaves them out"),
        doc="Rule names (globs) left out of max_format_findings.",
    ),
    BudgetKey(
        name="max_device_memory",
        kind="memory",
        judged=OnPlatform(_device_memory, needs_census=False),
        doc="The device memory a check's compile plans per device (compiled platforms): a "
        'fraction of the device\'s capacity (0.9) or a size ("12 GiB", "500 MB").',
        way_out=_smaller_plan,
    ),
)
"""Every budget key, once, in the order checks are judged against them (and the marker's
signature lists them): :mod:`~pytest_jaxport.model.config` reads the names, kinds and
``project_only`` from here, :func:`~pytest_jaxport.model.evaluation.evaluate` the judges."""

DECLARED: Mapping[str, BudgetKey] = {k.name: k for k in KEYS}
"""Each key of :data:`KEYS` by its name."""
_FRACTIONS = frozenset(k.name for k in KEYS if k.kind == "fraction")
RATCHETED: tuple[str, ...] = tuple(
    metric for k in KEYS if k.ratchet is not None for metric in (k.ratchet, *k.ratchet_also)
)
"""Every metric a baseline keeps (``library.`` stands for one per library), from the keys'
:attr:`~BudgetKey.ratchet` and :attr:`~BudgetKey.ratchet_also`, in the keys' order."""
RATCHETED_SHARES: frozenset[str] = frozenset(
    k.ratchet for k in KEYS if k.ratchet is not None and k.kind == "fraction"
)
"""The ratcheted metrics that are shares (a fraction key's ratchet): shown as percentages."""
_LISTS: frozenset[Kind] = frozenset({"platforms", "globs", "formats", "rules"})
"""The kinds whose value is a list, which a violation's rule says (``forbid_formats = [...]``)."""


def _forbidden(formats: FormatCensus, used: Sequence[str], base: Violation) -> Violation:
    """``base`` with the findings at the forbidden formats' lines, or how many ops use them
    where no rule flags them (an op without a kept location has no line)."""
    findings = tuple(f for f in formats.findings if set(f.formats) & set(used))
    if findings:
        return replace(base, findings=findings)
    ops = sum(formats.formats[name] for name in used)
    at = [
        f"{name} at {', '.join(map(str, formats.lines[name]))}"
        + (f" (its first {LINES_KEPT} lines)" if len(formats.lines[name]) == LINES_KEPT else "")
        for name in used
        if formats.lines.get(name)
    ]
    if at:  # no rule flags the format on this device: the ops' own lines say where
        return replace(base, details=tuple(at))
    return replace(base, details=(f"in {ops} {'op' if ops == 1 else 'ops'} (no rule flags them "
                                  "on this device, and no op kept its line)",))  # fmt: skip
