"""The suite audit as data: per-test records joined into the report's ``audit`` section (pure).

Each test's :class:`AuditTestRecord` travels on its teardown report; :class:`AuditLedger`
joins them, in any order and from any process, into the section a serial run builds: each
distinct computation once (keyed by content), its owner the first test in collection order
among its users, the suite's numbers over the distinct computations, and the suite's budget
(``[tool.jaxport.audit] fail_on``, ``--jaxport-baseline``) judged once (:func:`judge`). The
section's shape: docs/reference.md ("The report's audit section").

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict, cast

from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.census import Census
from pytest_jaxport.model.config import Budget
from pytest_jaxport.model.cost import COST_KEYS, CostModel, RewriteItem
from pytest_jaxport.model.counted_lines import CountedLines, collected_files
from pytest_jaxport.model.counts import platform_counts
from pytest_jaxport.model.evaluation import evaluate, rewrite_violations
from pytest_jaxport.model.findings import FormatCensus
from pytest_jaxport.model.hotspots import Hotspot, Reach, hotspots, reach_of, site_order
from pytest_jaxport.model.jsontypes import Json, JsonObject
from pytest_jaxport.model.memory import DeviceMemory
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.report.audit_section import (
    AuditFinding,
    AuditSection,
    Computation,
    TestUse,
    computation_label,
)
from pytest_jaxport.report.baseline import AuditCounts, audit_changes, audit_counts
from pytest_jaxport.report.reader import record_reader
from pytest_jaxport.report.summary import (
    Pricing,
    apart_numbers,
    platform_totals,
    suite_numbers,
)
from pytest_jaxport.report.totals import Numbers, PlatformTotals


def _json_table(read_table: Mapping[str, object]) -> Mapping[str, Json]:
    """A read_table this package recorded (what the hook could see, a count's change), as the
    section keeps it."""
    return cast("Mapping[str, Json]", read_table)


SUITE = "the audited suite"
"""The name suite-level budget violations carry."""


class FindingRecord(TypedDict):
    """A computation that could not be lowered, or compiled, for a platform, and why."""

    platform: str
    kind: str
    """``host-callback`` (a Python callback no other backend can lower), ``lowering``, or
    :data:`COMPILE_FINDING` (it lowered; the compile asked of it gave no program)."""
    reason: str


class ComputationRecord(TypedDict):
    """One distinct computation as a worker recorded it (no users: the ledger adds them)."""

    id: str
    function: str
    source: str | None
    kind: str
    signature: list[str]
    shardings: list[str]
    static_arguments: str | None
    donated: list[int]
    mesh: str | None
    host_callbacks: list[str]
    partitions: int
    """Devices the program is partitioned over (``1``: not sharded); above 1 its census
    counts the collectives XLA's SPMD partitioner inserts."""
    platforms: dict[str, JsonObject]
    """Per platform, the same entry a check has (``lowered`` census, ``error``...)."""
    findings: list[FindingRecord]


class AuditTestRecord(TypedDict):
    """What one test (or the time before the first test) did, as it travels on its report."""

    nodeid: str
    index: int
    """The test's position in collection order (the same in every xdist worker)."""
    uses: list[str]
    """Ids of the computations it ran (each once)."""
    outside: list[str]
    """Ids of computations run outside any test since the previous record (module import,
    collection)."""
    computations: list[ComputationRecord]
    """Computations this process saw for the first time since its previous record."""
    calls: int
    """Cache-miss calls the hook recorded."""
    compiled_outside: int
    """Backend compilations outside the hook and outside the plugin: not audited."""
    errors: list[str]


class AuditRecord(AuditTestRecord, total=False):
    """A test's record as it travels: the first from each process also says what the audit's
    hook could see there."""

    interception: dict[str, object] | None


def finding_kind(host_callbacks: Sequence[str], present: bool) -> str:
    """A lowering failure of a computation with host callbacks, on a platform not present
    here, is the callbacks' (no other backend can lower a Python callback); else a finding
    of its own."""
    return "host-callback" if host_callbacks and not present else "lowering"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditSettings:
    """What an audit section is assembled with, besides what the tests ran: what the hook
    could see, the platforms it lowered for, who counts as an eager op's users, and how the
    suite's moves are priced."""

    interception: Mapping[str, object] | None
    platforms: tuple[str, ...]
    pricing: Pricing
    eager_users: str = "owner"
    counted: CountedLines | None = None
    """Which lines count in the three numbers (the rest reported apart); the ledger adds the
    files its tests were collected from. ``None``: every line (a report before it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvents:
    """What the audited processes counted besides the computations: the hook's cache-miss
    calls, the compilations outside it, and the audit's own errors."""

    calls: int = 0
    compiled_outside: int = 0
    errors: tuple[str, ...] = ()


class AuditLedger:
    """Merges per-test records (from any process, in any order) into the audit section."""

    def __init__(self) -> None:
        self.computations: dict[str, ComputationRecord] = {}
        self._recorded: dict[str, int] = {}
        self._uses: dict[str, dict[str, int]] = {}
        self._outside: set[str] = set()
        self._tests: dict[str, tuple[int, list[str]]] = {}
        self.calls = 0
        self.compiled_outside = 0
        self.errors: list[str] = []

    def add(self, record: AuditRecord) -> None:
        for computation in record["computations"]:
            # The version recorded earliest in collection order is the serial run's: JAX
            # traced it there, so its census points at that test's call site in every run.
            cid = computation["id"]
            if cid not in self.computations or record["index"] < self._recorded[cid]:
                self.computations[cid] = computation
                self._recorded[cid] = record["index"]
        self._outside.update(record["outside"])
        self._tests[record["nodeid"]] = (record["index"], list(record["uses"]))
        for cid in record["uses"]:
            self._uses.setdefault(cid, {})[record["nodeid"]] = record["index"]
        self.calls += record["calls"]
        self.compiled_outside += record["compiled_outside"]
        self.errors += record["errors"]

    def _users(self, cid: str) -> tuple[str, ...]:
        users = self._uses.get(cid, {})
        return tuple(sorted(users, key=lambda nodeid: (users[nodeid], nodeid)))

    def section(self, settings: AuditSettings) -> AuditSection:
        """The report's ``audit`` section (see the module docstring)."""
        index = {nodeid: i for nodeid, (i, _) in self._tests.items()}
        computations = [
            replace(
                Computation.read(record_reader(record, f"audit.computations[{cid}]")),
                users=self._users(cid),
                outside_tests=cid in self._outside,
            )
            for cid, record in self.computations.items()
        ]
        uses = {nodeid: list(used) for nodeid, (_, used) in sorted(
            self._tests.items(), key=lambda t: (t[1][0], t[0]))}  # fmt: skip
        events = AuditEvents(
            calls=self.calls, compiled_outside=self.compiled_outside, errors=tuple(self.errors)
        )
        if settings.counted is not None:  # the tests' own files: those they were collected from
            counted = settings.counted.with_tests(collected_files(self._tests))
            settings = replace(settings, counted=counted)
        return assemble(
            computations, uses, index=index, tests=len(self._tests), events=events,
            settings=settings,
        )  # fmt: skip


def assemble(
    computations: Sequence[Computation],
    uses: Mapping[str, Sequence[str]],
    *,
    index: Mapping[str, int],
    tests: int,
    events: AuditEvents,
    settings: AuditSettings,
) -> AuditSection:
    """The ``audit`` section of distinct ``computations`` (each with its ``users`` in
    collection order) and the computations each test ran (``uses``, tests in collection
    order; ``index`` their positions): owners, the ``seen`` counts, the suite's numbers and
    sites, each computation counted once. What a run's ledger and ``jaxport merge`` build.

    ``eager_users="owner"`` (``[tool.jaxport.audit] eager_users``): an eager op's only user
    is its owner. Each process records it in the first test that ran it there (JAX serves
    later calls from its caches): the owner, and under pytest-xdist each other worker's
    first too, which a serial run never sees."""
    eager_users = settings.eager_users
    owned = []
    for c in computations:
        users = c.users[:1] if eager_users == "owner" and c.kind == "eager" else c.users
        owned.append(replace(c, users=users, owner=users[0] if users else None))
    owned.sort(key=_owner_order(index))
    owner = {c.id: c.owner for c in owned}
    # in the computations' order, not the order the test's calls missed JAX's caches: that
    # depends on what else the process ran (a cache another test's lowering filled)
    order = {c.id: i for i, c in enumerate(owned)}
    ran: dict[str, TestUse] = {}
    eager = {c.id for c in owned if c.kind == "eager"}
    for nodeid, used in uses.items():
        if eager_users == "owner":
            used = [cid for cid in used if cid not in eager or owner.get(cid) == nodeid]
        if used:
            ordered = tuple(sorted(used, key=lambda cid: (order.get(cid, len(order)), cid)))
            ran[nodeid] = TestUse(owns=tuple(cid for cid in ordered if owner.get(cid) == nodeid),
                                  uses=ordered)  # fmt: skip
    found = hotspots(reaches(owned))
    counted = settings.counted
    totals, numbers = audit_summary(owned, found, settings.pricing, counted)
    apart = None
    if counted is not None:
        apart = apart_numbers(map(probe_of, owned), settings.pricing, found, counted.counts)
    errors = events.errors
    return AuditSection(
        interception=_json_table(dict(settings.interception or {})),
        platforms=tuple(settings.platforms),
        eager_users=eager_users,
        seen=_seen(owned, ran, tests=tests, events=events),
        totals=totals,
        numbers=numbers,
        sites=tuple(sorted(found, key=site_order)),
        findings=tuple(
            AuditFinding(computation=c.id, function=c.function, **f)
            for c in owned
            for f in c.findings or ()
        ),
        computations=tuple(owned),
        tests=ran,
        cost=settings.pricing.model,
        audit_errors=tuple(sorted(set(errors))[:20]) if errors else None,
        counted=counted,
        apart=apart,
    )


def _seen(
    computations: Sequence[Computation],
    ran: Mapping[str, TestUse],
    *,
    tests: int,
    events: AuditEvents,
) -> dict[str, int]:
    """The counts of what the audit saw (the section's ``seen``)."""
    return {
        "computations": len(computations),
        "jit": sum(c.kind == "jit" for c in computations),
        "eager": sum(c.kind == "eager" for c in computations),
        "tests": tests,
        "tests_using": len(ran),
        "tests_owning": sum(bool(t.owns) for t in ran.values()),
        "shared": sum(len(c.users) > 1 for c in computations),
        "outside_tests": sum(c.outside_tests for c in computations),
        "partitioned": sum(c.partitions > 1 for c in computations),
        "calls": events.calls,
        "compiled_outside": events.compiled_outside,
        "audit_errors": len(events.errors),
    }


def _owner_order(index: Mapping[str, int]) -> Callable[[Computation], tuple[int, str, str]]:
    """Computations by their owner's place in collection order, then function and id."""

    def order(c: Computation) -> tuple[int, str, str]:
        return (index.get(c.owner, -1) if c.owner else -1, c.function, c.id)

    return order


def merge_audits(sections: Sequence[tuple[str, AuditSection]], *, pricing: Pricing) -> AuditSection:
    """One audit of several legs' ``(leg name, audit section)``: the union of their
    computations by id (one computation two legs ran counts once; the first leg's census,
    the union of its users), their tests in leg order (a test in two legs, the union of what
    it ran), and the suite's numbers, sites and ``seen`` counts recomputed over the union
    with the first leg's cost model (``cost``). Events (calls, compilations outside jit
    dispatch, the audit's errors) are summed; the suite budget failures are each leg's own
    judgement, kept with the leg's name (merging does not re-read ``fail_on``). Eager ops
    count in their owner only where one leg counted them so (``eager_users``)."""
    computations: dict[str, Computation] = {}
    users: dict[str, dict[str, None]] = {}
    uses: dict[str, dict[str, None]] = {}
    platforms: dict[str, None] = {}
    calls = compiled_outside = 0
    errors: list[str] = []
    violations: list[Violation] = []
    growth: list[Mapping[str, Json]] = []
    interceptions: list[Mapping[str, Json]] = []
    idle = 0  # tests that ran nothing jitted, per leg (not listed by name)
    eager_users = "all"
    counted: CountedLines | None = None  # the legs' tests together; the first leg's paths
    for leg, section in sections:
        if section.eager_users != "all":
            eager_users = "owner"
        if section.counted is not None:
            counted = section.counted if counted is None else counted + section.counted
        interceptions.append(section.interception)
        platforms.update(dict.fromkeys(section.platforms))
        for c in section.computations:
            had = computations.setdefault(c.id, replace(c, users=()))
            computations[c.id] = replace(had, outside_tests=had.outside_tests or c.outside_tests)
            users.setdefault(c.id, {}).update(dict.fromkeys(c.users))
        for nodeid, test in section.tests.items():
            uses.setdefault(nodeid, {}).update(dict.fromkeys(test.uses))
        seen = section.seen
        idle = max(idle, seen.get("tests", 0) - seen.get("tests_using", 0))
        calls += seen.get("calls", 0)
        compiled_outside += seen.get("compiled_outside", 0)
        errors += section.audit_errors or ()
        violations += section.violations or ()  # each leg's judgement (its leg not kept)
        growth += [{**g, "leg": leg} for g in section.baseline_growth or ()]
    index = {nodeid: i for i, nodeid in enumerate(uses)}
    merged_computations = [
        replace(c, users=tuple(sorted(users[cid], key=lambda n: (index.get(n, len(index)), n))))
        for cid, c in computations.items()
    ]
    interception = dict(interceptions[0]) if interceptions else {}
    versions = list(dict.fromkeys(str(i.get("jax")) for i in interceptions if i.get("jax")))
    if len(versions) > 1:
        interception["jax"] = ", ".join(versions)
    cost = sections[0][1].cost or CostModel()
    model = CostModel(**{k: float(getattr(cost, k)) for k in COST_KEYS})
    merged = assemble(
        merged_computations,
        {nodeid: list(used) for nodeid, used in uses.items()},
        index=index,
        tests=len(uses) + idle,
        events=AuditEvents(calls=calls, compiled_outside=compiled_outside, errors=tuple(errors)),
        settings=AuditSettings(
            interception=interception,
            platforms=tuple(platforms),
            eager_users=eager_users,
            pricing=replace(pricing, model=model),
            counted=counted,
        ),
    )
    fail_on = next((s.fail_on for _, s in sections if s.fail_on), None)
    return replace(
        merged,
        violations=tuple(violations),
        baseline_growth=tuple(growth),
        legs=tuple(leg for leg, _ in sections),
        # the first leg's that had one; each leg's violations stay its own judgement
        fail_on=dict(fail_on) if fail_on else None,
    )


def probe_of(computation: Computation) -> Probe:
    """An audited computation's probe: its platforms, named by its label."""
    return Probe(name=computation_label(computation.id, computation.function), reference="cpu",
                 platforms=computation.platforms)  # fmt: skip


def audit_summary(
    computations: Sequence[Computation],
    found: Iterable[Hotspot],
    pricing: Pricing,
    counted: CountedLines | None = None,
) -> tuple[dict[str, PlatformTotals], Numbers]:
    """The platform totals (with the distinct sites ``found``) and the three numbers over
    the distinct computations, each counted once: the kernels and days of the lines
    ``counted`` counts (every line's without it)."""
    probes = [probe_of(c) for c in computations]
    lines = counted.counts if counted is not None else None
    return platform_totals(platform_counts(probes), found), suite_numbers(
        probes, pricing, lines=lines
    )


def reaches(computations: Iterable[Computation]) -> Iterator[Reach]:
    """Each computation's census per platform, once per test that ran it (``test=None``
    for one run only outside tests), with its estimated runtime share: what
    :func:`~pytest_jaxport.model.hotspots.hotspots` counts, each computation once per site."""
    for computation in computations:
        users: list[str | None] = list(computation.users) or [None]
        for entry in computation.platforms.values():
            for user in users:  # at the level its counts read (compiled where compiled)
                reach = reach_of(user, computation.id, entry)
                if reach is not None:
                    yield reach


# -- budgets: [tool.jaxport.audit] fail_on -------------------------------------------------


def audited_suite(section: AuditSection) -> Probe:
    """The audited suite as one probe, the sum of its distinct computations': per platform
    their census and formats-and-layout findings added up, the failures to lower
    (``error``, naming each computation) and the suite's estimated runtime share."""
    shares = section.numbers.runtime_share if section.numbers is not None else {}
    platforms: dict[str, PlatformProbe] = {}
    for platform in section.platforms:
        censuses: list[Census] = []
        found: list[FormatCensus] = []
        failures = []
        present = False
        for c in section.computations:
            entry = c.platforms.get(platform)
            if entry is None:
                continue
            present = present or entry.present
            if entry.census is not None:
                censuses.append(entry.census)
                if entry.formats is not None:
                    found.append(entry.formats)
            elif entry.error:
                where = f" ({c.source})" if c.source else ""
                failures.append(f"{c.function}{where}: {entry.error}")
        census = Census(platform=platform).plus(censuses)
        formats = found[0].plus(found[1:]) if found else None
        error = None
        if failures:
            error = f"{len(failures)} computation(s) failed to lower: " + "; ".join(failures[:5])
            if len(failures) > 5:
                error += f"; and {len(failures) - 5} more"
        platforms[platform] = PlatformProbe(
            platform=platform,
            present=present,
            census=census,
            error=error,
            runtime_share=shares.get(platform),
            formats=formats,
            memory=largest_memory(section, platform),
        )
    return Probe(name=SUITE, reference="cpu", platforms=platforms)


def largest_memory(section: AuditSection, platform: str) -> DeviceMemory | None:
    """The memory of the suite's computation that needs the most on ``platform``'s device
    (where a compiler planned it): what ``max_device_memory`` in ``fail_on`` judges, as one
    device runs one computation at a time. ``None`` where none was planned."""
    planned = [
        memory
        for c in section.computations
        if (memory := _memory_of(c, platform)) is not None and memory.needed_bytes is not None
    ]
    return max(planned, key=lambda m: m.needed_bytes or 0, default=None)


def _memory_of(computation: Computation, platform: str) -> DeviceMemory | None:
    entry = computation.platforms.get(platform)
    return entry.memory if entry is not None else None


def fail_on_violations(
    section: AuditSection, budget_for: Callable[[str], Budget], pricing: Pricing
) -> list[Violation]:
    """Every limit of ``[tool.jaxport.audit] fail_on`` the suite breaks (its distinct
    computations together, each counted once), moving off the home platform."""
    violations = evaluate(audited_suite(section), budget_for)
    rewrite = section.numbers.rewrite if section.numbers is not None else {}
    missing = section.numbers.not_lowered if section.numbers is not None else {}
    home = pricing.home
    for target in pricing.migrate_to:
        estimate = rewrite.get(target)
        if target in missing:  # never counted: a limit on it cannot pass
            violations += rewrite_violations(SUITE, budget_for(target), kernels=0, days=0.0,
                                             details=(), home=home,
                                             not_lowered=missing[target])  # fmt: skip
        if estimate is None:
            continue
        violations += rewrite_violations(
            SUITE,
            budget_for(target),
            kernels=estimate.kernels_to_rewrite,
            days=estimate.days,
            details=tuple(_item_text(i) for i in estimate.items),
            home=home,
        )
    return violations


def _item_text(item: RewriteItem) -> str:
    where = f" at {item.location}" if item.location else ""
    return f"{item.name} ({item.kind}){where}: {item.status}"


# -- the judgement: one, for the whole suite --------------------------------------------------


def judge(
    section: AuditSection,
    *,
    budget_for: Callable[[str], Budget],
    pricing: Pricing,
    baseline: AuditCounts | None = None,
) -> AuditSection:
    """``section`` with the suite's budget failures: ``violations`` (the limits of
    ``[tool.jaxport.audit] fail_on`` it breaks) and ``baseline_growth`` (the counts that grew
    since ``baseline``'s audit counts, when given)."""
    violations = fail_on_violations(section, budget_for, pricing)
    grown = audit_changes(baseline, audit_counts(section)) if baseline is not None else []
    return replace(
        section,
        violations=tuple(violations),
        baseline_growth=tuple(_json_table(c.to_dict()) for c in grown if c.grew),
    )


def failures(section: AuditSection) -> int:
    """How many suite-level budget failures ``section`` records (each fails the session)."""
    return len(section.violations or ()) + len(section.baseline_growth or ())
