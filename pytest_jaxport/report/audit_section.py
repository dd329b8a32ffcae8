"""The report's ``audit`` section as typed values (pure): :class:`AuditSection`, each distinct
:class:`Computation`, the findings (:class:`AuditFinding`) and what each test used
(:class:`TestUse`). docs/reference.md ("The report's audit section") describes its JSON.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.cost import CostModel
from pytest_jaxport.model.counted_lines import CountedLines
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.jsontypes import Json, as_json
from pytest_jaxport.model.probe import PlatformProbe, platform_to_dict
from pytest_jaxport.report.entries import read_platform, read_violation
from pytest_jaxport.report.reader import Reader, is_integer
from pytest_jaxport.report.totals import Numbers, PlatformTotals, cost_dict, read_cost, read_hotspot


def computation_label(cid: str, function: str = "?") -> str:
    """``mlp [3f2a1b2c]``: the function and the start of the computation's key (one function
    traced for two signatures is two computations).

    >>> computation_label("3f2a1b2c9d", "mlp")
    'mlp [3f2a1b2c]'
    """
    return f"{function} [{cid[:8]}]"


COMPILE_FINDING = "compile"
"""The kind of an audit finding whose computation lowered but did not compile (the
compiler's refusal, a compile past its time limit, libtpu's worker dead): its reason is the
compiler's words, at the line they name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFinding:
    """A computation that could not be lowered, or compiled, for a platform, and why
    (``kind``: ``host-callback``, ``lowering`` or :data:`COMPILE_FINDING`)."""

    computation: str
    function: str
    platform: str
    kind: str
    reason: str

    @classmethod
    def read(cls, r: Reader) -> AuditFinding:
        return cls(**{key: r.text(key) for key in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Json]:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True, kw_only=True)
class Computation:
    """One distinct computation the audit saw: what it is, who ran it, and per platform the
    same entry a check has (:class:`~pytest_jaxport.model.probe.PlatformProbe`)."""

    id: str
    function: str
    source: str | None
    kind: str
    signature: tuple[str, ...]
    shardings: tuple[str, ...] | None = None
    static_arguments: str | None = None
    donated: tuple[int, ...] | None = None
    mesh: str | None = None
    host_callbacks: tuple[str, ...] | None = None
    partitions: int = 1
    owner: str | None = None
    users: tuple[str, ...] = ()
    outside_tests: bool = False
    findings: tuple[Mapping[str, str], ...] | None = None
    platforms: Mapping[str, PlatformProbe] = field(default_factory=dict)

    @classmethod
    def read(cls, r: Reader) -> Computation:
        kind = r.text("kind")
        if kind not in ("jit", "eager"):
            raise r.error(r.at("kind"), "jit or eager", kind)
        donated = None
        if r.has("donated"):
            values = r.json("donated")
            if not isinstance(values, list) or not all(is_integer(v) for v in values):
                raise r.error(r.at("donated"), "a list of integers", values)
            donated = tuple(cast("list[int]", values))
        findings = None
        if r.has("findings"):
            findings = tuple(
                {k: f.text(k) for k in ("platform", "kind", "reason")} for f in r.items("findings")
            )
        return cls(
            id=r.text("id"),
            function=r.text("function"),
            source=r.opt_text("source"),
            kind=kind,
            signature=r.texts("signature"),
            shardings=r.texts("shardings") if r.has("shardings") else None,
            static_arguments=r.opt_text("static_arguments"),
            donated=donated,
            mesh=r.opt_text("mesh"),
            host_callbacks=r.texts("host_callbacks") if r.has("host_callbacks") else None,
            partitions=r.integer("partitions", 1),
            owner=r.opt_text("owner"),
            users=r.texts("users", ()),
            outside_tests=r.flag("outside_tests", False),
            findings=findings,
            platforms={p: read_platform(p, e) for p, e in r.tables("platforms").items()},
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "id": self.id,
            "function": self.function,
            "source": self.source,
            "kind": self.kind,
            "signature": list(self.signature),
        }
        if self.shardings is not None:
            data["shardings"] = list(self.shardings)
        data["static_arguments"] = self.static_arguments
        if self.donated is not None:
            data["donated"] = list(self.donated)
        data["mesh"] = self.mesh
        if self.host_callbacks is not None:
            data["host_callbacks"] = list(self.host_callbacks)
        data["partitions"] = self.partitions
        data["platforms"] = {p: as_json(platform_to_dict(e)) for p, e in self.platforms.items()}
        if self.findings is not None:
            data["findings"] = [dict(f) for f in self.findings]
        data["users"] = list(self.users)
        data["outside_tests"] = self.outside_tests
        data["owner"] = self.owner
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class TestUse:
    """The computations one test owns (ran first) and uses."""

    __test__ = False

    owns: tuple[str, ...]
    uses: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditSection:
    """The report's ``audit`` (``--jaxport-audit``): what the hook could see, the counts of
    what it saw, the suite's totals and numbers, each distinct site, the findings, every
    computation, which test used which, the cost model, and the suite budget's judgement."""

    interception: Mapping[str, Json]
    platforms: tuple[str, ...]
    eager_users: str
    seen: Mapping[str, int]
    totals: Mapping[str, PlatformTotals]
    numbers: Numbers | None
    sites: tuple[Hotspot, ...]
    findings: tuple[AuditFinding, ...]
    computations: tuple[Computation, ...]
    tests: Mapping[str, TestUse]
    cost: CostModel | None = None
    audit_errors: tuple[str, ...] | None = None
    violations: tuple[Violation, ...] | None = None
    baseline_growth: tuple[Mapping[str, Json], ...] | None = None
    fail_on: Mapping[str, Json] | None = None
    legs: tuple[str, ...] | None = None
    counted: CountedLines | None = None
    """Which lines :attr:`numbers` counts (``None``: every line, as before there was a
    choice)."""
    apart: Numbers | None = None
    """The numbers of the lines not counted (the tests' own), reported apart: their kernels
    and days per target, the part of the suite's estimated time spent there; ``None`` where
    nothing was found there."""

    @classmethod
    def read(cls, r: Reader) -> AuditSection:
        summary = r.table("summary")
        tests = {
            nodeid: TestUse(owns=t.texts("owns", ()), uses=t.texts("uses", ()))
            for nodeid, t in r.tables("tests").items()
        }
        growth = None
        if r.has("baseline_growth"):
            growth = tuple(
                dict(cast("Mapping[str, Json]", g.data)) for g in r.items("baseline_growth")
            )
        fail_on = r.opt_table("fail_on")
        return cls(
            interception=dict(cast("Mapping[str, Json]", r.table("interception").data)),
            platforms=r.texts("platforms"),
            eager_users=r.text("eager_users", "owner"),
            seen=r.counts("seen"),
            totals={p: PlatformTotals.read(t) for p, t in summary.tables("platforms").items()},
            numbers=Numbers.read(summary),
            sites=tuple(read_hotspot(s, audit=True) for s in r.items("sites")),
            findings=tuple(AuditFinding.read(f) for f in r.items("findings", ())),
            computations=tuple(Computation.read(c) for c in r.items("computations")),
            tests=tests,
            cost=read_cost(r.table("cost")) if r.has("cost") else None,
            audit_errors=r.texts("audit_errors") if r.has("audit_errors") else None,
            violations=tuple(read_violation(v) for v in r.items("violations"))
            if r.has("violations")
            else None,
            baseline_growth=growth,
            fail_on=dict(cast("Mapping[str, Json]", fail_on.data)) if fail_on else None,
            legs=r.texts("legs") if r.has("legs") else None,
            counted=_read_counted(r.table("counted")) if r.has("counted") else None,
            apart=Numbers.read(r.table("apart")) if r.has("apart") else None,
        )

    def to_dict(self) -> dict[str, Json]:
        summary: dict[str, Json] = {"platforms": {p: t.to_dict() for p, t in self.totals.items()}}
        if self.numbers is not None:
            summary.update(self.numbers.to_dict())
        data: dict[str, Json] = {
            "interception": dict(self.interception),
            "platforms": list(self.platforms),
            "eager_users": self.eager_users,
            "seen": dict(self.seen),
            "summary": summary,
            "sites": [as_json(h.to_audit_dict()) for h in self.sites],
            "findings": [f.to_dict() for f in self.findings],
            "computations": [c.to_dict() for c in self.computations],
            "tests": {
                n: {"owns": list(t.owns), "uses": list(t.uses)} for n, t in self.tests.items()
            },
        }
        if self.cost is not None:
            data["cost"] = cost_dict(self.cost)
        if self.audit_errors is not None:
            data["audit_errors"] = list(self.audit_errors)
        if self.violations is not None:
            data["violations"] = [as_json(v.to_dict()) for v in self.violations]
        if self.baseline_growth is not None:
            data["baseline_growth"] = [dict(g) for g in self.baseline_growth]
        if self.fail_on is not None:
            data["fail_on"] = dict(self.fail_on)
        if self.legs is not None:
            data["legs"] = list(self.legs)
        if self.counted is not None:
            data["counted"] = {k: list(v) for k, v in self.counted.to_dict().items()}
        if self.apart is not None:
            data["apart"] = self.apart.to_dict()
        return data


def _read_counted(r: Reader) -> CountedLines:
    """Which lines an audit's numbers count, as the section says it."""
    return CountedLines(paths=r.texts("paths", ()), tests=r.texts("tests", ()))
