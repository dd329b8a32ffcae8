"""``[tool.jaxport]`` read from pyproject.toml: a table of its keys (:data:`PROJECT_KEYS`),
each with how its value is read into the configuration, and the checks that span keys.

Every value is checked once, here or by the validator of its kind
(:mod:`pytest_jaxport.model.validators`), and every error names the file, the key, what was
expected and what was found. Keys are read in the order of :data:`PROJECT_KEYS`: a key after
those whose values it is checked against (``reference`` and ``home`` against ``platforms``,
``migrate_to`` against ``home``), so the first error a table has is the one said. The checks
that need the whole table come last: every platform a budget table names is lowered
(:func:`budgets_lowered`), and so is every ``migrate_to`` destination.

Example::

    >>> project = parse_project({"platforms": ["cpu", "tpu"], "home": "tpu"}, "pyproject.toml")
    >>> project.home, project.migrate_to
    ('tpu', ())
    >>> try:
    ...     parse_project({"platfroms": ["cpu"]}, "pyproject.toml")
    ... except ConfigError as e:
    ...     print(str(e)[:83])
    pyproject.toml: [tool.jaxport]: unknown key 'platfroms' (did you mean 'platforms'?)

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_jaxport.model.budget import DECLARED
from pytest_jaxport.model.classification import libraries
from pytest_jaxport.model.config import (
    BUDGET_KEYS,
    DEFAULT_REFERENCE,
    DEVICE_PLATFORMS,
    DTYPES,
    EAGER_USERS,
    TOLERANCE_KEYS,
    AuditConfig,
    BudgetTable,
    ConfigError,
    ProjectConfig,
    Setting,
    ToleranceSetting,
    default_migrate_to,
    migrate_destinations,
)
from pytest_jaxport.model.cost import COST_KEYS
from pytest_jaxport.model.devices import DEVICE_NAMES, GENERATIONS, Device, device_for
from pytest_jaxport.model.hints import LIBRARY_LIMIT_KEY, did_you_mean, platforms_meant
from pytest_jaxport.model.libtpu import COMPILE_TARGETS, MAX_COMPILE_TIME_LIMIT, shape_problem
from pytest_jaxport.model.platforms import (
    DESCRIPTIONS,
    NVIDIA_PLATFORM,
    PLATFORM_VENDORS,
    PLATFORMS,
    ordered_platforms,
)
from pytest_jaxport.model.validators import (
    Where,
    budget_value,
    compile_platforms,
    compiled_among,
    days_value,
    emulate_platforms,
    emulated_among,
    globs_value,
    gpu_value,
    growth_value,
    home_platform,
    may_differ_value,
    migrate_among,
    platform_value,
    platforms_value,
    takes_table,
    tolerance_value,
    transforms_value,
    type_name,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectFile:
    """Where ``[tool.jaxport]`` is read from: the file as errors name it (``source``) and the
    folder relative paths are taken from (``base``)."""

    source: str
    base: Path | None = None

    @property
    def where(self) -> Where:
        """``pyproject.toml: [tool.jaxport]``: where an error about one of its keys is."""
        return Where(f"{self.source}: [tool.jaxport]")

    @property
    def origin(self) -> str:
        """``pyproject.toml [tool.jaxport]``: where a setting it holds was set."""
        return f"{self.source} [tool.jaxport]"

    def at(self, key: str) -> str:
        """``pyproject.toml: [tool.jaxport] compile``: what an error about ``key`` starts
        with."""
        return f"{self.where.prefix} {key}"


Reader = Callable[[ProjectFile, object, ProjectConfig], ProjectConfig]
"""How a key's value is read: validated (an error names the file and the key), and set on
the configuration read so far (which holds the keys read before it)."""

_UNREAD = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectKey:
    """One key of ``[tool.jaxport]``, declared once: its name, how its value is read
    (:data:`Reader`: the validator, every error naming the file, the key, what was expected
    and what was found), and what it reads as where it is not written."""

    name: str
    read: Reader
    default: object = _UNREAD
    """The value the key is read as where it is not written (a check that spans keys still
    runs: ``reference`` must be among ``platforms``, the default ``"cpu"`` too); unset: the
    key is not read, and :class:`~pytest_jaxport.model.config.ProjectConfig`'s default
    stands."""


# -- each key's reader ----------------------------------------------------------------------


def _platforms(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, platforms=platforms_value(file.where, "platforms", value,
                                                      empty_ok=False))  # fmt: skip


def _reference(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    """A platform among ``platforms`` (its outputs are what the others are compared with)."""
    reference = platform_value(file.where, "reference", value)
    if reference not in project.platforms:
        raise ConfigError(
            f"{file.source}: [tool.jaxport] reference: expected one of the configured platforms "
            f"({', '.join(project.platforms)}), found {reference!r}"
        )
    return replace(project, reference=reference)


def _compile(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, compile=compile_platforms(file.at("compile"), value))


def _compile_time_limit(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    """Seconds, above 0 and at most :data:`MAX_COMPILE_TIME_LIMIT` (``inf`` and ``nan``
    too are refused: the wait is the operating system's)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= MAX_COMPILE_TIME_LIMIT
    ):
        raise file.where.error(
            "compile_time_limit",
            f"a number of seconds greater than 0 and at most {MAX_COMPILE_TIME_LIMIT:,.0f} "
            "(a day; e.g. 60)",
            value,
        )
    return replace(project, compile_time_limit=float(value))


def _gpu(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, gpu=gpu_value(file.at("target"), value, file.base))


def _what_if_no_vendor(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    if not isinstance(value, bool):
        raise file.where.error("what_if_no_vendor", "a boolean (true or false)", value)
    return replace(project, what_if_no_vendor=value)


def _home(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, home=home_platform(file.where.prefix, value, project.platforms))


def _migrate_to(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    """Platforms other than ``home`` (a move is priced off home); whether the checks lower
    for them is checked once the whole table is read (a ``must_lower`` may add one)."""
    home = project.home
    destinations = migrate_destinations(home)
    homes = [
        v for v in value if isinstance(v, str) and platforms_meant(v) == (home,)
    ] if isinstance(value, list) else []  # fmt: skip
    if homes:  # the home, or another name for it (nvidia for cuda)
        vendor = PLATFORM_VENDORS[home].removeprefix("the ")
        raise ConfigError(
            f"{file.at('migrate_to')}: expected non-{vendor} targets "
            f"({', '.join(destinations)}): the cost model prices moving off {home}, the home "
            f"platform ([tool.jaxport] home), found {homes[0]!r}"
        )
    migrate_to = platforms_value(
        file.where, "migrate_to", value, empty_ok=True, choices=ordered_platforms(destinations)
    )
    return replace(project, migrate_to=migrate_to, migrate_to_set=True)


def _cost(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, cost=_cost_table(file.source, value))


def _transforms(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, transforms=transforms_value(file.at("transforms"), value))


def _scan(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    enabled, exclude = _scan_table(file.source, value)
    return replace(project, scan=enabled, scan_exclude=exclude)


def _devices(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, devices=_devices_table(file.source, value))


def _emulate(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    """Platforms among ``platforms`` (an emulation runs the platform's lowering)."""
    emulated = emulate_platforms(file.at("emulate"), value)
    emulated_among(file.at("emulate"), emulated, project.platforms)
    emulate = Setting(value=emulated, origin=file.origin) if emulated else None
    return replace(project, emulate=emulate)


def _own_packages(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, own_packages=_package_names(file.where, "own_packages", value))


def _may_differ(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    said = may_differ_value(file.at("may_differ"), value)
    return replace(project, may_differ=Setting(value=said, origin=file.origin))


def _memory_growth(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    growth = growth_value(file.at("memory_growth"), value)
    return replace(project, memory_growth=Setting(value=growth, origin=file.origin))


def _budget(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    budget, platform_budgets = _budget_section(file.source, "tool.jaxport.budget", value)
    return replace(project, budget=budget, platform_budgets=platform_budgets)


def _audit(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    return replace(project, audit=_audit_table(file.source, value, file.base))


def _tolerance(file: ProjectFile, value: object, project: ProjectConfig) -> ProjectConfig:
    tolerances, platform_tolerances = _tolerance_section(file, value)
    return replace(project, tolerances=tolerances, platform_tolerances=platform_tolerances)


PROJECT_KEYS: tuple[ProjectKey, ...] = (
    ProjectKey(name="platforms", read=_platforms),
    ProjectKey(name="reference", read=_reference, default=DEFAULT_REFERENCE),
    ProjectKey(name="compile", read=_compile),
    ProjectKey(name="compile_time_limit", read=_compile_time_limit),
    ProjectKey(name="target", read=_gpu),
    ProjectKey(name="what_if_no_vendor", read=_what_if_no_vendor),
    ProjectKey(name="home", read=_home),
    ProjectKey(name="migrate_to", read=_migrate_to),
    ProjectKey(name="cost", read=_cost),
    ProjectKey(name="transforms", read=_transforms),
    ProjectKey(name="scan", read=_scan),
    ProjectKey(name="devices", read=_devices),
    ProjectKey(name="emulate", read=_emulate),
    ProjectKey(name="own_packages", read=_own_packages),
    ProjectKey(name="may_differ", read=_may_differ),
    ProjectKey(name="memory_growth", read=_memory_growth),
    # read where not written too: the budget's origin names the file
    ProjectKey(name="budget", read=_budget, default={}),
    ProjectKey(name="audit", read=_audit),
    ProjectKey(name="tolerance", read=_tolerance),
)
"""Every key of ``[tool.jaxport]``, in the order they are read (what each reads is in the
module's docstring; docs/reference.md's table says each one's meaning)."""

TOP_KEYS: tuple[str, ...] = (
    "platforms",
    "reference",
    "compile",
    "compile_time_limit",
    "target",
    "what_if_no_vendor",
    "migrate_to",
    "home",
    "budget",
    "tolerance",
    "cost",
    "scan",
    "transforms",
    "audit",
    "devices",
    "emulate",
    "may_differ",
    "memory_growth",
    "own_packages",
)
"""The keys of :data:`PROJECT_KEYS` as an unknown key's error lists them (the reference's
order)."""
assert sorted(TOP_KEYS) == sorted(k.name for k in PROJECT_KEYS), "a key read but not listed"
AUDIT_KEYS = ("enabled", "eager_users", "fail_on", "counted_paths")
SCAN_KEYS = ("enabled", "exclude")


def parse_project(
    data: Mapping[str, object], source: str, *, base: Path | None = None
) -> ProjectConfig:
    """Validate the ``[tool.jaxport]`` table read from ``source`` (in folder ``base``): each
    key of :data:`PROJECT_KEYS` in turn, then the checks that need the whole table."""
    file = ProjectFile(source=source, base=base)
    for name in data:
        if name not in TOP_KEYS:
            raise file.where.unknown(name, TOP_KEYS)
    project = ProjectConfig(source=source)
    for key in PROJECT_KEYS:
        value = data.get(key.name, key.default)
        if value is not _UNREAD:
            project = key.read(file, value, project)
    budgets_lowered(source, project)
    lowered = project.lowered()
    compiled_among(file.at("compile"), project.compile, lowered)
    if not project.migrate_to_set:
        return replace(project, migrate_to=default_migrate_to(lowered, project.home))
    migrate_among(file.at("migrate_to"), project.migrate_to, lowered)
    return project


# -- the tables under [tool.jaxport] ----------------------------------------------------------


def _tolerance_section(
    file: ProjectFile, raw_tolerance: object
) -> tuple[dict[str, ToleranceSetting], dict[str, dict[str, ToleranceSetting]]]:
    """``[tool.jaxport.tolerance.<dtype>]`` and
    ``[tool.jaxport.tolerance.<platform>.<dtype>]``."""
    source, where = file.source, file.where
    platform_tolerances: dict[str, dict[str, ToleranceSetting]] = {}
    if not isinstance(raw_tolerance, Mapping):
        raise where.error("tolerance", "a table ([tool.jaxport.tolerance.<dtype>])", raw_tolerance)
    dtype_entries = {}
    for key, value in raw_tolerance.items():
        if key in PLATFORMS:
            if not isinstance(value, Mapping):
                raise Where(f"{source}: [tool.jaxport.tolerance]").error(
                    key, f"a table ([tool.jaxport.tolerance.{key}.<dtype>])", value
                )
            platform_tolerances[key] = _dtype_tables(source, f"tool.jaxport.tolerance.{key}", value)
        elif key in DTYPES:
            dtype_entries[key] = value
        else:
            raise Where(f"{source}: [tool.jaxport.tolerance]").unknown(
                key, (*DTYPES, *PLATFORMS), what="dtype or platform"
            )
    return _dtype_tables(source, "tool.jaxport.tolerance", dtype_entries), platform_tolerances


def _budget_table(source: str, name: str, table: Mapping[str, object]) -> BudgetTable:
    where = Where(f"{source}: [{name}]")
    values = {}
    for key, value in table.items():
        if key not in BUDGET_KEYS:
            raise where.unknown(key, BUDGET_KEYS, value=value)
        only_why = DECLARED[key].project_only
        if only_why is not None and name != "tool.jaxport.budget":
            raise ConfigError(
                f"{where.prefix} {key}: expected only in [tool.jaxport.budget] ({only_why}), "
                "found it here"
            )
        values[key] = budget_value(where, key, value)
    return BudgetTable(origin=f"{source} [{name}]", values=values)


def _tolerance_table(source: str, name: str, table: object) -> ToleranceSetting:
    where = Where(f"{source}: [{name}]")
    if not isinstance(table, Mapping):
        raise Where(f"{source}: [{name.rsplit('.', 1)[0]}]").error(
            name.rsplit(".", 1)[1], "a table with rtol and/or atol", table
        )
    for key in table:
        if key not in TOLERANCE_KEYS:
            raise where.unknown(key, TOLERANCE_KEYS)
    return ToleranceSetting(
        rtol=tolerance_value(where, "rtol", table["rtol"]) if "rtol" in table else None,
        atol=tolerance_value(where, "atol", table["atol"]) if "atol" in table else None,
        origin=f"{source} [{name}]",
    )


def _dtype_tables(
    source: str, name: str, table: Mapping[str, object]
) -> dict[str, ToleranceSetting]:
    where = Where(f"{source}: [{name}]")
    result = {}
    for dtype, entry in table.items():
        if dtype not in DTYPES:
            raise where.unknown(dtype, DTYPES, what="dtype")
        result[dtype] = _tolerance_table(source, f"{name}.{dtype}", entry)
    return result


def _cost_table(source: str, table: object) -> dict[str, float]:
    if not isinstance(table, Mapping):
        raise Where(f"{source}: [tool.jaxport]").error("cost", "a table of days", table)
    where = Where(f"{source}: [tool.jaxport.cost]")
    days = {}
    for key, value in table.items():
        if key not in COST_KEYS:
            raise where.unknown(key, COST_KEYS)
        days[key] = days_value(where, key, value)
    return days


def _scan_table(source: str, table: object) -> tuple[bool, tuple[str, ...]]:
    if not isinstance(table, Mapping):
        raise Where(f"{source}: [tool.jaxport]").error("scan", "a table", table)
    where = Where(f"{source}: [tool.jaxport.scan]")
    for key in table:
        if key not in SCAN_KEYS:
            raise where.unknown(key, SCAN_KEYS)
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise where.error("enabled", "a boolean (true or false)", enabled)
    exclude = table.get("exclude", [])
    if isinstance(exclude, str):
        exclude = [exclude]
    return enabled, globs_value(where, "exclude", exclude) if exclude else ()


def _devices_table(source: str, table: object) -> dict[str, Device]:
    """``devices = { rocm = "mi300", tpu = "v6e" }``: the device the formats-and-layout rules
    judge each platform for."""
    if not isinstance(table, Mapping):
        raise Where(f"{source}: [tool.jaxport]").error(
            "devices", 'a table of platform = device (e.g. { rocm = "mi300", tpu = "v6e" })', table
        )
    where = Where(f"{source}: [tool.jaxport] devices.")
    devices = {}
    for platform, name in table.items():
        if platforms_meant(platform) == (NVIDIA_PLATFORM,):  # cuda, or nvidia
            named = "" if platform == NVIDIA_PLATFORM else f"{platform!r} is cuda here, and "
            raise ConfigError(
                f"{source}: [tool.jaxport] devices.{platform}: {named}cuda's device is `target` "
                "(a GPU description: h100, a100, h200 or a file), so one GPU is described "
                "once; set [tool.jaxport] target instead"
            )
        if platform not in DEVICE_PLATFORMS:
            raise Where(f"{source}: [tool.jaxport] devices").unknown(
                platform, DEVICE_PLATFORMS, what="platform"
            )
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(
                f"{where.prefix}{platform}: expected a device name (e.g. "
                f"{DESCRIPTIONS[platform].device_example}), found {type_name(name)}"
            )
        name, colon, shape = name.partition(":")
        try:
            devices[platform] = device_for(platform, name)
        except ValueError:
            known = sorted(
                {n for n, d in DEVICE_NAMES.items() if d.platform == platform}
                | set(GENERATIONS[platform])
            )
            raise ConfigError(
                f"{where.prefix}{platform}: unknown {platform} device {name!r}"
                f"{did_you_mean(name.strip().lower(), known)}; expected one of: "
                f"{', '.join(known)}"
            ) from None
        if colon:  # "v5e:" names no topology: said, not read as "v5e"
            # libtpu's names are lower case; the device's name is read in any case too
            shape = shape.strip().lower()
            devices[platform] = _with_topology(where, platform, devices[platform], shape)
    return devices


def _with_topology(where: Where, platform: str, device: Device, shape: str) -> Device:
    """``device`` with the slice ``shape`` a partitioned program compiles for
    (``tpu = "v5e:2x2"``), where its platform compiles without the device."""
    from dataclasses import replace

    if platform not in COMPILE_TARGETS:
        raise ConfigError(
            f"{where.prefix}{platform}: a topology (':{shape}') is for a platform compiled "
            f"without its device ({', '.join(COMPILE_TARGETS)}); {platform} takes a device "
            "name alone"
        )
    try:
        problem = shape_problem(platform, device.generation, shape)
    except ValueError as e:
        raise ConfigError(f"{where.prefix}{platform}: {e}") from None
    if problem is not None:
        raise ConfigError(f"{where.prefix}{platform}: {problem}")
    return replace(device, topology=shape)


def _package_names(where: Where, key: str, value: object) -> tuple[str, ...]:
    """A list of import names (``["lineax", "my_models"]``)."""
    if not isinstance(value, list):
        raise where.error(key, 'a list of package import names, e.g. ["lineax"]', value)
    for name in value:
        if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")):
            raise ConfigError(
                f'{where.prefix} {key}: expected package import names such as "lineax" '
                f"(the name you import), found {name!r}"
            )
    return tuple(value)


def _budget_section(
    source: str, name: str, raw: object
) -> tuple[BudgetTable, dict[str, BudgetTable]]:
    """A budget table (``[tool.jaxport.budget]`` or ``[tool.jaxport.audit.fail_on]``): its own
    keys, and a sub-table per platform."""
    budget = BudgetTable(origin=f"{source} [{name}]")
    platform_budgets: dict[str, BudgetTable] = {}
    if not isinstance(raw, Mapping):
        parent, _, key = name.rpartition(".")
        raise Where(f"{source}: [{parent}]").error(key, f"a table ([{name}])", raw)
    common = {}
    budget_where = Where(f"{source}: [{name}]")
    for key, value in raw.items():
        if key in PLATFORMS:
            if not isinstance(value, Mapping):
                raise budget_where.error(key, f"a table ([{name}.{key}])", value)
            platform_budgets[key] = _budget_table(source, f"{name}.{key}", value)
            _libraries_of(source, f"{name}.{key}", key, platform_budgets[key])
        elif isinstance(value, Mapping) and not takes_table(key):
            raise budget_where.unknown(
                key, (*BUDGET_KEYS, *PLATFORMS), what="key or platform", value=value
            )
        else:
            common[key] = value
    if common:
        budget = _budget_table(source, name, common)
    return budget, platform_budgets


def _libraries_of(source: str, name: str, platform: str, table: BudgetTable) -> None:
    """A platform's budget limits only libraries that platform calls: a limit on one it never
    has (cudnn on rocm) would pass whatever the code does."""
    limits = table.values.get(LIBRARY_LIMIT_KEY)
    has = sorted(libraries(platform))
    for library in limits if isinstance(limits, dict) else ():
        if library in has:
            continue
        elsewhere = [p for p in PLATFORMS if library in libraries(p)]
        raise ConfigError(
            f"{source}: [{name}] {LIBRARY_LIMIT_KEY}.{library}: {platform} never calls "
            f"{library} (a library of {', '.join(elsewhere)}), so the limit could not fail; "
            f"expected one of {platform}'s libraries ({', '.join(has)}), or set it in "
            f"[{name.rpartition('.')[0]}.{elsewhere[0]}]"
        )


def budgets_lowered(source: str, project: ProjectConfig) -> None:
    """Every platform a budget table names is one the checks lower for (the suite audit's
    ``fail_on`` tables: one its ``platforms`` name): a budget for a platform nothing lowers
    for would pass whatever the code does."""
    for tables, lowered, name in (
        (project.platform_budgets, project.lowered(), "tool.jaxport.budget"),
        (project.audit.platform_fail_on, project.platforms, "tool.jaxport.audit.fail_on"),
    ):
        for platform, table in tables.items():
            if table.values and platform not in lowered:
                raise ConfigError(
                    f"{source}: [{name}.{platform}]: a budget for {platform}, which the checks "
                    f"do not lower for (they lower for {', '.join(lowered)}), would pass "
                    f"whatever the code does; add {platform!r} to [tool.jaxport] platforms, or "
                    "remove the table"
                )


def _audit_table(source: str, value: object, base: Path | None = None) -> AuditConfig:
    """``audit = true`` or ``[tool.jaxport.audit]`` (``enabled``, ``eager_users``,
    ``fail_on``, ``counted_paths``: paths relative to ``base``, the file's folder)."""
    if isinstance(value, bool):
        return AuditConfig(enabled=value)
    if not isinstance(value, Mapping):
        raise Where(f"{source}: [tool.jaxport]").error(
            "audit", "a boolean (true or false) or a table ([tool.jaxport.audit])", value
        )
    where = Where(f"{source}: [tool.jaxport.audit]")
    for key in value:
        if key not in AUDIT_KEYS:
            raise where.unknown(key, AUDIT_KEYS)
    enabled = value.get("enabled", True)
    if not isinstance(enabled, bool):
        raise where.error("enabled", "a boolean (true or false)", enabled)
    eager_users = value.get("eager_users", "owner")
    if eager_users not in EAGER_USERS:
        raise where.error("eager_users", '"owner" or "all"', eager_users)
    fail_on, platform_fail_on = _budget_section(
        source, "tool.jaxport.audit.fail_on", value.get("fail_on", {})
    )
    return AuditConfig(
        enabled=enabled,
        eager_users=eager_users,
        fail_on=fail_on,
        platform_fail_on=platform_fail_on,
        counted_paths=counted_paths_value(where, value.get("counted_paths", []), base),
    )


def counted_paths_value(where: Where, value: object, base: Path | None) -> tuple[str, ...]:
    """``[tool.jaxport.audit] counted_paths``: globs relative to ``base`` (the rootdir,
    where pyproject.toml is), none absolute or above it; a path without glob characters
    must exist there (a misspelt folder would count nothing, silently).

    >>> where = Where("pyproject.toml: [tool.jaxport.audit]")
    >>> counted_paths_value(where, ["src/mylib", "**/ops.py"], None)
    ('src/mylib', '**/ops.py')
    >>> try:
    ...     counted_paths_value(where, ["../lib"], None)
    ... except ConfigError as e:
    ...     print(str(e)[37:96])
    counted_paths: '../lib' is not inside the rootdir; expected
    """
    key = "counted_paths"
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        expected = 'a list of paths or globs relative to the rootdir (e.g. ["src/mylib"])'
        raise where.error(key, expected, value)
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise where.error(key, "non-empty strings only", value)
        parts = item.replace("\\", "/").split("/")
        if item.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", item) or ".." in parts:
            raise ConfigError(
                f"{where.prefix} {key}: {item!r} is not inside the rootdir; expected a path "
                'relative to it (the folder of pyproject.toml), e.g. "src/mylib"'
            )
        if base is not None and not any(c in item for c in "*?[") and not (base / item).exists():
            parent = (base / item).parent
            names = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []
            raise ConfigError(
                f"{where.prefix} {key}: {item!r} is no file or folder in {base}"
                f"{did_you_mean(Path(item).name, names)}"
            )
    return tuple(value)


# -- the file ------------------------------------------------------------------------------------


def one_edit_apart(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one insertion, deletion, substitution or swap of two
    neighbouring letters (``jaxprot``, ``jaxpor``, ``jax-port`` and ``jaxport``), or by case."""
    if a == b:
        return False
    if a.casefold() == b.casefold():
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diff) == 1:
            return True
        i = diff[0]
        return len(diff) == 2 and diff[1] == i + 1 and a[i] == b[i + 1] and a[i + 1] == b[i]
    short, long = sorted((a, b), key=len)
    i = next((i for i, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1 :]


def misspelt_tables(path: Path | None, *, display: str | None = None) -> list[tuple[str, int]]:
    """A warning and the line of its table, per table of ``path`` one edit away from
    ``[tool.jaxport]``, which pytest-jaxport does not read (``[tool.jaxprot]``,
    ``[tools.jaxport]``)."""
    if path is None or not path.is_file():
        return []
    try:
        with path.open("rb") as f:
            document = tomllib.load(f)
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
        return []  # load_project says what is wrong with the file
    found = []
    for top, tables in document.items():
        if not isinstance(tables, Mapping) or not (top == "tool" or one_edit_apart(top, "tool")):
            continue
        for name in tables:
            if (top, name) != ("tool", "jaxport") and (
                one_edit_apart(name, "jaxport") or (top != "tool" and name == "jaxport")
            ):
                found.append(f"[{top}.{name}]")
    source = display or str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        (
            f"{source}: {table} is not read by pytest-jaxport: did you mean [tool.jaxport]? "
            "(its settings are ignored)",
            _table_line(lines, table),
        )
        for table in found
    ]


def _table_line(lines: Sequence[str], table: str) -> int:
    """The 1-based line where ``[a.b]`` (or a ``[a.b.c]`` under it) is opened; 1 if none."""
    top, name = table.strip("[]").split(".", 1)
    header = re.compile(rf"^\s*\[\s*{re.escape(top)}\s*\.\s*{re.escape(name)}\s*[.\]]")
    return next((i for i, line in enumerate(lines, 1) if header.match(line)), 1)


def load_project(path: Path | None, *, display: str | None = None) -> ProjectConfig:
    """Read ``[tool.jaxport]`` from the pyproject.toml at ``path`` (defaults when absent)."""
    if path is None or not path.is_file():
        return ProjectConfig()
    source = display or str(path)
    try:
        with path.open("rb") as f:
            document = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{source}: cannot be read: {e}") from None
    tool = document.get("tool", {})
    section = tool.get("jaxport") if isinstance(tool, Mapping) else None
    if section is None:
        return ProjectConfig(source=source)
    if not isinstance(section, Mapping):
        raise Where(f"{source}: [tool]").error("jaxport", "a table ([tool.jaxport])", section)
    return parse_project(section, source, base=path.parent)
