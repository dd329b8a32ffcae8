"""The configuration as values: ``[tool.jaxport]`` validated (:class:`ProjectConfig`), and
one test's configuration with its marker's keywords applied (:class:`Resolved`).

Each resolved limit remembers where it was set, so a failure message can say
"max_custom_calls = 0 (pyproject.toml [tool.jaxport.budget.cuda])". Precedence, lowest first:
defaults < ``[tool.jaxport.budget]`` < ``[tool.jaxport.budget.<platform>]`` <
``@pytest.mark.portable(...)`` keywords.

The values are read and checked once, every error naming the file and the key:
``[tool.jaxport]`` by :mod:`pytest_jaxport.model.pyproject` (its key table), the marker's
keywords by :mod:`pytest_jaxport.model.marker`, each kind of value by
:mod:`pytest_jaxport.model.validators`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_jaxport.model.budget import KEYS
from pytest_jaxport.model.budget import Budget as Budget  # re-exported: importers read it here
from pytest_jaxport.model.budget import Setting as Setting
from pytest_jaxport.model.devices import Device
from pytest_jaxport.model.dtypes import DTYPE_NAMES, ELEMENT_TYPES
from pytest_jaxport.model.format_rules import FORMAT_RULES
from pytest_jaxport.model.libtpu import DEFAULT_COMPILE_TIME_LIMIT
from pytest_jaxport.model.memory import MemoryLimit
from pytest_jaxport.model.numerics import Tolerance, default_tolerance, gradient_tolerance
from pytest_jaxport.model.platforms import (
    DEFAULT_HOME,
    DEFAULTS,
    DESCRIPTIONS,
    PLATFORMS,
    ordered_platforms,
)

DEFAULT_PLATFORMS: tuple[str, ...] = DEFAULTS
"""Lowered for where ``platforms`` is not configured: every described platform but those a
project opts into (oneapi)."""
DEFAULT_REFERENCE = "cpu"

BUDGET_KEYS: tuple[str, ...] = tuple(k.name for k in KEYS)
"""Every budget key, as :data:`pytest_jaxport.model.budget.KEYS` declares them."""
PROJECT_ONLY_KEYS: tuple[str, ...] = tuple(k.name for k in KEYS if k.project_only)
"""Budget keys set in ``[tool.jaxport.budget]`` only: not per platform, not by a marker."""

MAY_DIFFER: tuple[str, ...] = ("fail", "warn")
"""``may_differ``: what an emulation that *may differ* on the chip does to its test (it
matched, but the chip's measured errors move the outputs beyond the tolerance): ``fail``
it, or ``warn`` (a JaxportWarning)."""
DEFAULT_MAY_DIFFER = "fail"
"""Fail: the bounds are measured on the chip, not guessed, and on the corpus the chip did
differ in most checks the emulation said may differ (docs/reference.md, "may differ")."""
EAGER_USERS = ("owner", "all")
"""``[tool.jaxport.audit] eager_users``: which tests an op run eagerly is counted in."""
TRANSFORMS: tuple[str, ...] = ("grad", "vmap", "jvp")
"""What ``jaxport.check(..., transforms=...)`` checks besides the function itself."""
DEFAULT_MIGRATE_TO: tuple[str, ...] = tuple(p for p in DEFAULTS if p not in ("cpu", DEFAULT_HOME))
"""Priced where nothing is configured (rocm, tpu: the default platforms less cpu and cuda),
and by a merge of reports that do not say (:func:`default_migrate_to` follows what a project
lowers for)."""


def migrate_destinations(home: str = DEFAULT_HOME) -> tuple[str, ...]:
    """What ``migrate_to`` may name: every platform but ``home``, the host's last.

    >>> migrate_destinations("tpu")
    ('cuda', 'rocm', 'oneapi', 'cpu')
    """
    return (*(p for p in PLATFORMS if p not in ("cpu", home)), *(("cpu",) if home != "cpu" else ()))


MIGRATE_DESTINATIONS: tuple[str, ...] = migrate_destinations()
"""What ``migrate_to`` may name where ``home`` is not set: every platform but cuda."""
COMPILE_PLATFORMS: tuple[str, ...] = tuple(p.name for p in DESCRIPTIONS.values() if p.compiled)
"""Platforms the compiled level supports here: cpu always, cuda on a GPU or deviceless."""
DEFAULT_GPU = "h100"
"""The GPU description cuda compiles against where ``[tool.jaxport] target`` is not set."""
TOLERANCE_KEYS = ("rtol", "atol")
DEVICE_PLATFORMS: tuple[str, ...] = tuple(
    p.name for p in DESCRIPTIONS.values() if p.devices and p.name != "cuda"
)
"""The platforms ``devices`` names a device for (cuda's is ``target``, cpu has none)."""
FORMAT_NAMES: tuple[str, ...] = tuple(sorted(set(DTYPE_NAMES.values())))
"""What ``forbid_formats`` accepts: every format by its JAX name."""
RULE_NAMES: tuple[str, ...] = tuple(sorted({rule.name for rule in FORMAT_RULES}))
"""What ``allow_findings`` matches: the formats-and-layout rules' names."""

DEFAULT_MEMORY_GROWTH = 0.1
"""``memory_growth``: how much a check's planned device memory may grow from the base (the
baseline, ``jaxport diff``'s BASE) before the growth is flagged: 10%. A plan is the
compiler's and does not move run to run (the same program, compiler and device plan the
same bytes), so anything past it is the code's doing; a layer more in a model grows it, and
a lost donation or a materialised intermediate grows it by tens of percent."""

DTYPES: tuple[str, ...] = tuple(e.jax for e in ELEMENT_TYPES)
"""The dtypes ``[tool.jaxport.tolerance.<dtype>]`` takes, by their JAX names."""


BudgetValue = int | float | bool | tuple[str, ...] | dict[str, int] | MemoryLimit
"""A budget key's validated value (its kind's: a count, a fraction, a list, a table, a
memory limit)."""


class ConfigError(ValueError):
    """A user's configuration is wrong; the message says where and how."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetTable:
    """One table of budget keys as written, with its origin."""

    origin: str
    values: Mapping[str, BudgetValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToleranceSetting:
    """Configured ``rtol``/``atol`` for one dtype; ``None`` fields fall through to the next
    level, and last to the dtype's default (:meth:`Resolved.tolerance_for`). ``origin`` is the
    table that set them (``pyproject.toml [tool.jaxport.tolerance.tpu.float32]``)."""

    rtol: float | None = None
    atol: float | None = None
    origin: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Overrides:
    """Keywords of the closest ``portable`` marks, validated, per key with its origin."""

    values: Mapping[str, Setting[Any]] = field(default_factory=dict)

    def get(self, key: str) -> Setting[Any] | None:
        return self.values.get(key)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    """``[tool.jaxport] audit``: record every computation the suite runs (``--jaxport-audit``),
    and the suite-level budget ``fail_on`` that gates it."""

    enabled: bool = False
    eager_users: str = "owner"
    """``owner``: an op run eagerly (a ``jnp`` function, a primitive) is counted in the first
    test that runs it only; ``all``: in every test that runs it (each test's first call of
    each such op passes the audit's hook again: more CPU on a suite of eager tests)."""
    fail_on: BudgetTable = field(
        default_factory=lambda: BudgetTable(origin="[tool.jaxport.audit.fail_on]")
    )
    platform_fail_on: Mapping[str, BudgetTable] = field(default_factory=dict)
    counted_paths: tuple[str, ...] = ()
    """Globs relative to the rootdir whose lines count in the audit's three numbers (the
    rest reported apart); ``()``: every line but the tests' own
    (:class:`~pytest_jaxport.model.counted_lines.CountedLines`)."""

    @property
    def gated(self) -> bool:
        """Whether any ``fail_on`` limit is set."""
        return bool(self.fail_on.values) or any(t.values for t in self.platform_fail_on.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectConfig:
    """The whole ``[tool.jaxport]`` table, validated."""

    source: str = "defaults"
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS
    reference: str = DEFAULT_REFERENCE
    compile: tuple[str, ...] = ()
    compile_time_limit: float = DEFAULT_COMPILE_TIME_LIMIT
    """``compile_time_limit``: seconds a compile without the device (tpu's) may take before
    it is a finding ("compile exceeded 60 s on tpu") and the run goes on."""
    gpu: str = DEFAULT_GPU
    """``target``: a shipped GPU description's name (``h100``) or the absolute path of a text
    ``GpuTargetConfigProto``: what cuda compiles against where no GPU is present."""
    what_if_no_vendor: bool = False
    migrate_to: tuple[str, ...] = DEFAULT_MIGRATE_TO
    """The destinations the cost model prices a move to, off :attr:`home`."""
    migrate_to_set: bool = False
    """Whether ``migrate_to`` was configured; where not, it follows the platforms lowered
    (:func:`default_migrate_to`), on a ``--jaxport-platforms`` leg too."""
    home: str = DEFAULT_HOME
    """``home``: the platform moving is measured from (cuda unless set): its hand-written
    kernels and vendor gaps are what each of :attr:`migrate_to` rewrites."""
    cost: Mapping[str, float] = field(default_factory=dict)
    """``[tool.jaxport.cost]``: days per item, overriding the cost model's defaults."""
    scan: bool = True
    """``[tool.jaxport.scan] enabled``: scan the project for NVIDIA-bound tooling."""
    scan_exclude: tuple[str, ...] = ()
    budget: BudgetTable = field(default_factory=lambda: BudgetTable(origin="defaults"))
    platform_budgets: Mapping[str, BudgetTable] = field(default_factory=dict)
    tolerances: Mapping[str, ToleranceSetting] = field(default_factory=dict)
    platform_tolerances: Mapping[str, Mapping[str, ToleranceSetting]] = field(default_factory=dict)
    transforms: tuple[str, ...] = ()
    """``transforms``: the transformations every check also checks (``grad``, ``vmap``,
    ``jvp``), each as its own check ``name[grad]``."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    devices: Mapping[str, Device] = field(default_factory=dict)
    """``devices``: the device each of rocm and tpu is judged for by the formats-and-layout
    rules (the defaults where absent; cuda's is the ``target``'s)."""
    emulate: Setting[tuple[str, ...]] | None = None
    """``emulate``: the absent platforms every check also runs on the CPU as they would
    compute (``pytest_jaxport._jax.emulate``), and where that was set (``--jaxport-emulate``
    over ``[tool.jaxport]``)."""
    may_differ: Setting[str] = field(
        default_factory=lambda: Setting(value=DEFAULT_MAY_DIFFER, origin="the default")
    )
    """``may_differ``: ``fail`` or ``warn`` (:data:`MAY_DIFFER`), and where that was set."""
    memory_growth: Setting[float] | None = None
    """``memory_growth``: the share a check's planned device memory may grow by from the
    base before a baseline or ``jaxport diff`` flags it, and where that was set; ``None``
    where not set (:attr:`memory_threshold`: the default)."""
    own_packages: tuple[str, ...] = ()
    """``own_packages``: installed packages (import names) whose source lines reports show
    as the user's own; frames in any other installed package are a library's internals, and
    a kernel inside one is shown at the line that called into it."""

    @property
    def memory_threshold(self) -> Setting[float]:
        """:attr:`memory_growth`, or :data:`DEFAULT_MEMORY_GROWTH` where not set."""
        if self.memory_growth is not None:
            return self.memory_growth
        return Setting(value=DEFAULT_MEMORY_GROWTH, origin="the default")

    def audit_budget(self, platform: str) -> Budget:
        """``[tool.jaxport.audit.fail_on]`` < ``[tool.jaxport.audit.fail_on.<platform>]`` for
        the suite audit (project budgets do not apply to it: they are per check)."""
        tables = replace(
            self, budget=self.audit.fail_on, platform_budgets=self.audit.platform_fail_on
        )
        return tables.resolve().budget(platform)

    def lowered(self) -> tuple[str, ...]:
        """The platforms checks lower for: :attr:`platforms` and those a ``must_lower`` of
        ``[tool.jaxport.budget]`` adds (a marker may add more for its tests)."""
        return self.resolve().lowering_platforms()

    def budget_sources(self) -> list[str]:
        """Where budgets came from, for the report header."""
        tables = [self.budget, *self.platform_budgets.values()]
        return [t.origin for t in tables if t.values]

    def resolve(self, overrides: Overrides | None = None) -> Resolved:
        """Apply marker overrides to the project settings for one test."""
        overrides = overrides or Overrides()
        platforms = overrides.get("platforms")
        reference = overrides.get("reference")
        return Resolved(
            project=self,
            overrides=overrides,
            platforms=tuple(platforms.value) if platforms else self.platforms,
            reference=reference.value if reference else self.reference,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """Configuration for one test: project settings with its marker overrides applied."""

    project: ProjectConfig
    overrides: Overrides
    platforms: tuple[str, ...]
    reference: str

    def lowering_platforms(self) -> tuple[str, ...]:
        """Configured platforms plus any ``must_lower`` platform not among them, in order."""
        return (*self.platforms, *self.added_by_must_lower())

    def added_by_must_lower(self) -> dict[str, str]:
        """The platforms checks lower for beyond ``platforms`` because a ``must_lower`` names
        them (a gate ``--jaxport-platforms`` does not loosen), each with where that
        ``must_lower`` was set, in order."""
        added: dict[str, str] = {}
        musts = (self.budget(platform).must_lower for platform in PLATFORMS)
        for must in (m for m in musts if m is not None):
            for name in must.value:
                if name not in self.platforms:
                    added.setdefault(name, must.origin)
        return added

    def transforms(self) -> tuple[str, ...]:
        """The transformations this test's checks also check: the closest marker's
        ``transforms``, else ``[tool.jaxport] transforms``."""
        marker = self.overrides.get("transforms")
        return tuple(marker.value) if marker else self.project.transforms

    def emulate(self) -> Setting[tuple[str, ...]] | None:
        """The platforms this test's checks emulate and where that was set: the closest
        marker's ``emulate``, else the command line's or ``[tool.jaxport]``'s, the latter
        only for platforms this test lowers for (a marker's ``platforms`` may narrow them);
        ``None`` when nothing is emulated."""
        marker = self.overrides.get("emulate")
        found = marker if marker is not None else self.project.emulate
        if found is None:
            return None
        kept = tuple(p for p in found.value if p in self.platforms)
        return Setting(value=kept, origin=found.origin) if kept else None

    def may_differ(self) -> Setting[str]:
        """What an emulation that may differ on the chip does to this test (``fail`` or
        ``warn``), and where that was set: the closest marker's, else ``[tool.jaxport]``'s."""
        marker = self.overrides.get("may_differ")
        return marker if marker is not None else self.project.may_differ

    def budget(self, platform: str) -> Budget:
        """Merge defaults < project budget < platform budget < marker, key by key."""
        layers: list[tuple[Mapping[str, BudgetValue], Mapping[str, str]]] = []
        for table in (self.project.budget, self.project.platform_budgets.get(platform)):
            if table is not None:
                layers.append((table.values, dict.fromkeys(table.values, table.origin)))
        marker = {k: s for k, s in self.overrides.values.items() if k in BUDGET_KEYS}
        layers.append(
            ({k: s.value for k, s in marker.items()}, {k: s.origin for k, s in marker.items()})
        )
        settings: dict[str, Setting[BudgetValue]] = {}
        tables: dict[str, dict[str, Setting[int]]] = {}  # max_library_calls: entry by entry
        for values, origins in layers:
            for key, value in values.items():
                if isinstance(value, Mapping):
                    entries = tables.setdefault(key, {})
                    for name, limit in value.items():
                        entries[name] = Setting(value=limit, origin=origins[key])
                else:
                    settings[key] = Setting(value=value, origin=origins[key])
        return Budget(platform=platform, **tables, **settings)  # type: ignore[arg-type]

    def tolerance(self, platform: str, dtype: str) -> ToleranceSetting:
        """The configured tolerance for ``dtype`` on ``platform``; unset fields are ``None``."""
        rtol, atol = self._tolerance_settings(platform, dtype)
        return ToleranceSetting(
            rtol=rtol.value if rtol else None, atol=atol.value if atol else None
        )

    def _tolerance_settings(
        self, platform: str, dtype: str
    ) -> tuple[Setting[float] | None, Setting[float] | None]:
        """``rtol`` and ``atol`` as configured, each with where it was set (``None`` where
        nothing sets it): ``[tool.jaxport.tolerance.<dtype>]`` <
        ``[tool.jaxport.tolerance.<platform>.<dtype>]`` < the closest marker's keywords."""
        found: dict[str, Setting[float] | None] = dict.fromkeys(TOLERANCE_KEYS)
        for table in (
            self.project.tolerances.get(dtype),
            self.project.platform_tolerances.get(platform, {}).get(dtype),
        ):
            for key in TOLERANCE_KEYS:
                value = None if table is None else getattr(table, key)
                if table is not None and value is not None:
                    found[key] = Setting(value=value, origin=table.origin)
        for key in TOLERANCE_KEYS:
            marker = self.overrides.get(key)
            if marker is not None:
                found[key] = Setting(
                    value=marker.value, origin=f"@pytest.mark.portable on {marker.origin}"
                )
        return found["rtol"], found["atol"]

    def tolerance_for(self, platform: str, dtype: str, *, gradient: bool = False) -> Tolerance:
        """The tolerance comparing ``platform``'s ``dtype`` outputs with the reference's: the
        configured fields over the dtype's default (JAX's gradient tolerances for a
        derivative's check, ``gradient``), with where each was set (``origin``: one place,
        or ``<rtol's> (rtol) and <atol's> (atol)`` when they differ)."""
        rtol, atol = self._tolerance_settings(platform, dtype)
        default = gradient_tolerance(dtype) if gradient else default_tolerance(dtype)
        rtol = rtol or Setting(value=default.rtol, origin=default.origin)
        atol = atol or Setting(value=default.atol, origin=default.origin)
        origin = (
            rtol.origin
            if rtol.origin == atol.origin
            else f"{rtol.origin} (rtol) and {atol.origin} (atol)"
        )
        return Tolerance(rtol=rtol.value, atol=atol.value, origin=origin)


def default_migrate_to(lowered: Sequence[str], home: str = DEFAULT_HOME) -> tuple[str, ...]:
    """What is priced where ``migrate_to`` is not set: every platform the checks lower for
    (``lowered``: ``platforms`` and the platforms a ``must_lower`` adds) but the host and
    ``home``, in the usual order (:data:`DEFAULT_MIGRATE_TO` off cuda with the default
    platforms). A platform not lowered has no count: pricing a move there would say 0.

    >>> default_migrate_to(("cpu", "cuda", "oneapi"))
    ('oneapi',)
    >>> default_migrate_to(("cpu", "cuda", "tpu", "oneapi"), home="tpu")
    ('cuda', 'oneapi')
    """
    return tuple(p for p in ordered_platforms(lowered) if p not in ("cpu", home))
