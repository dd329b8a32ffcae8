"""``[tool.jaxport]`` and marker keywords -> frozen, validated configuration.

Every value is checked once, here, and every error names the file, the key, what was
expected and what was found. Each resolved limit remembers where it was set, so a failure
message can say "max_custom_calls = 0 (pyproject.toml [tool.jaxport.budget.cuda])".

Precedence, lowest first: defaults < ``[tool.jaxport.budget]`` <
``[tool.jaxport.budget.<platform>]`` < ``@pytest.mark.portable(...)`` keywords.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import inspect
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, get_args

from pytest_jaxport.model.budget import DECLARED, KEYS, Kind
from pytest_jaxport.model.budget import Budget as Budget  # re-exported: importers read it here
from pytest_jaxport.model.budget import Setting as Setting
from pytest_jaxport.model.classification import all_libraries, libraries
from pytest_jaxport.model.cost import COST_KEYS
from pytest_jaxport.model.devices import DEVICE_NAMES, GENERATIONS, Device, device_for
from pytest_jaxport.model.dtypes import DTYPE_NAMES
from pytest_jaxport.model.emulation import EMULATED_PLATFORMS
from pytest_jaxport.model.format_rules import FORMAT_RULES
from pytest_jaxport.model.gpu import SHIPPED_TARGETS, load_target
from pytest_jaxport.model.libtpu import (
    COMPILE_TARGETS,
    DEFAULT_COMPILE_TIME_LIMIT,
    shape_problem,
)
from pytest_jaxport.model.numerics import Tolerance, default_tolerance, gradient_tolerance
from pytest_jaxport.model.platforms import (
    DEFAULT_HOME,
    DEFAULTS,
    DESCRIPTIONS,
    JAX_GPU,
    NVIDIA_PLATFORM,
    PLATFORM_ALIASES,
    PLATFORM_VENDORS,
    PLATFORMS,
    needs_newer_jax,
    ordered_platforms,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_PLATFORMS: tuple[str, ...] = DEFAULTS
"""Lowered for where ``platforms`` is not configured: every described platform but those a
project opts into (oneapi)."""
DEFAULT_REFERENCE = "cpu"

BUDGET_KEYS: tuple[str, ...] = tuple(k.name for k in KEYS)
"""Every budget key, as :data:`pytest_jaxport.model.budget.KEYS` declares them."""
PROJECT_ONLY_KEYS: tuple[str, ...] = tuple(k.name for k in KEYS if k.project_only)
"""Budget keys set in ``[tool.jaxport.budget]`` only: not per platform, not by a marker."""
MARKER_OPTIONS: tuple[tuple[str, str], ...] = (
    ("platforms", "Sequence[str] | None"),
    ("reference", "str | None"),
    ("rtol", "float | None"),
    ("atol", "float | None"),
    ("transforms", "Sequence[str] | None"),
    ("emulate", "Sequence[str] | None"),
    ("may_differ", "str | None"),
)
"""The marker's keywords besides the budget keys, each with its type as ``--markers`` says it."""
MARKER_KEYS: tuple[str, ...] = (
    *(k.name for k in KEYS if k.marker),
    *(name for name, _ in MARKER_OPTIONS),
)
TOP_KEYS = (
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
    "own_packages",
)
AUDIT_KEYS = ("enabled", "eager_users", "fail_on")
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


def migrate_targets(home: str = DEFAULT_HOME) -> tuple[str, ...]:
    """What ``migrate_to`` may name: every platform but ``home``, the host's last.

    >>> migrate_targets("tpu")
    ('cuda', 'rocm', 'oneapi', 'cpu')
    """
    return (*(p for p in PLATFORMS if p not in ("cpu", home)), *(("cpu",) if home != "cpu" else ()))


MIGRATE_TARGETS: tuple[str, ...] = migrate_targets()
"""What ``migrate_to`` may name where ``home`` is not set: every platform but cuda."""
SCAN_KEYS = ("enabled", "exclude")
COMPILE_PLATFORMS: tuple[str, ...] = tuple(p.name for p in DESCRIPTIONS.values() if p.compiled)
"""Platforms the compiled level supports here: cpu always, cuda on a GPU or deviceless."""
DEFAULT_TARGET = "h100"
TOLERANCE_KEYS = ("rtol", "atol")
DEVICE_PLATFORMS: tuple[str, ...] = tuple(
    p.name for p in DESCRIPTIONS.values() if p.devices and p.name != "cuda"
)
"""The platforms ``devices`` names a device for (cuda's is ``target``, cpu has none)."""
FORMAT_NAMES: tuple[str, ...] = tuple(sorted(set(DTYPE_NAMES.values())))
"""What ``forbid_formats`` accepts: every format by its JAX name."""
RULE_NAMES: tuple[str, ...] = tuple(sorted({rule.name for rule in FORMAT_RULES}))
"""What ``allow_findings`` matches: the formats-and-layout rules' names."""

DTYPES: tuple[str, ...] = (
    "bool",
    "int2", "int4", "int8", "int16", "int32", "int64",
    "uint2", "uint4", "uint8", "uint16", "uint32", "uint64",
    "float4_e2m1fn", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "bfloat16", "float16", "float32", "float64",
    "complex64", "complex128",
)  # fmt: skip


BudgetValue = int | float | bool | tuple[str, ...] | dict[str, int]
"""A budget key's validated value (its kind's: a count, a fraction, a list, a table)."""


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
    target: str = DEFAULT_TARGET
    """A shipped GPU description's name (``h100``) or the absolute path of a text
    ``GpuTargetConfigProto``: what cuda compiles against where no GPU is present."""
    what_if_no_vendor: bool = False
    migrate_to: tuple[str, ...] = DEFAULT_MIGRATE_TO
    """The targets the cost model prices a move to, off :attr:`home`."""
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
    own_packages: tuple[str, ...] = ()
    """``own_packages``: installed packages (import names) whose source lines reports show
    as the user's own; frames in any other installed package are a library's internals, and
    a kernel inside one is shown at the line that called into it."""

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


# -- validation ---------------------------------------------------------------------------


def _platform_words() -> dict[str, frozenset[str]]:
    words: dict[str, set[str]] = {}
    for platform in PLATFORMS:
        for word in (platform, *PLATFORM_ALIASES.get(platform, ())):
            words.setdefault(word, set()).add(platform)
    return {word: frozenset(platforms) for word, platforms in words.items()}


_PLATFORM_WORDS: Mapping[str, frozenset[str]] = _platform_words()
"""Each platform's name and :data:`~pytest_jaxport.model.targets.PLATFORM_ALIASES`, to the
platforms each means (``gpu``: cuda, rocm and oneapi)."""


def _word_means(word: str) -> frozenset[str] | None:
    """The platforms one lower-case word means, also with a version or a plural ending
    (``cuda12``, ``gpus``); ``None`` for a word that names none."""
    for form in (word, word.rstrip("0123456789"), word.removesuffix("s")):
        if form in _PLATFORM_WORDS:
            return _PLATFORM_WORDS[form]
    return None


def platforms_meant(word: str) -> tuple[str, ...]:
    """The platforms a user's word for one means, in :data:`PLATFORMS` order: ``nvidia``,
    ``CUDA12`` and ``nvidia-gpu`` mean cuda, ``gpu`` means cuda, rocm and oneapi; ``()`` for a
    word that names none.

    >>> platforms_meant("nvidia_gpu"), platforms_meant("GPUs"), platforms_meant("float32")
    (('cuda',), ('cuda', 'rocm', 'oneapi'), ())
    """
    text = word.strip().casefold()
    whole = _word_means(text)
    found = [whole] if whole is not None else [
        meant for part in re.split(r"[^0-9a-z]+", text) if (meant := _word_means(part))
    ]  # fmt: skip
    if not found:
        return ()
    common = frozenset.intersection(*found)
    return tuple(p for p in PLATFORMS if p in common)


def platform_hint(word: str, choices: Sequence[str] = PLATFORMS) -> str:
    """What to write instead of ``word`` where a platform from ``choices`` is expected, when
    it is another name for one (``nvidia``, ``amd``, ``google``, JAX's ``gpu``); ``""`` for
    any other word.

    >>> platform_hint("nvidia")
    " (did you mean 'cuda', NVIDIA's platform?)"
    """
    meant = [p for p in platforms_meant(word) if p in choices]
    if not meant:
        return ""
    if len(meant) == 1:
        return f" (did you mean {meant[0]!r}, {PLATFORM_VENDORS[meant[0]]}'s platform?)"
    what = (
        "is JAX's name for any GPU backend"  # jax.devices("gpu")
        if set(meant) == set(JAX_GPU)
        else "could mean several platforms"
    )
    each = ", ".join(f"{p!r} for {PLATFORM_VENDORS[p]}" for p in meant)
    return f" ({word!r} {what}: write {each}, or {'both' if len(meant) == 2 else 'several'})"


LIBRARY_LIMIT_KEY = next(k.name for k in KEYS if k.kind == "libraries")
"""The budget key that limits one library's calls: ``max_cudnn_calls`` is written
``max_library_calls = { cudnn = 2 }``."""


def library_key_hint(key: str, value: object = None, *, marker: bool = False) -> str:
    """Where a budget key names a vendor library (``max_cudnn_calls``, ``cublas``), how its
    limit is written: ``max_library_calls = { cudnn = 2 }`` in pyproject.toml, or the
    marker's ``max_library_calls={"cudnn": 2}``; ``""`` for any other key. The library
    names are the classification table's (:func:`~pytest_jaxport.model.targets.all_libraries`).

    >>> library_key_hint("max_cudnn_calls", 2)
    ' (did you mean max_library_calls = { cudnn = 2 }?)'
    """
    parts = [p for p in re.split(r"[^0-9a-z]+", key.casefold()) if p]
    if "share" in parts:  # a share is per layer (max_vendor_share), never per library
        return ""
    known = sorted(all_libraries())
    library = next((p for p in parts if p in known), None)
    if library is None:
        library = next(
            (c[0] for p in parts if (c := difflib.get_close_matches(p, known, 1, 0.8))), None
        )
    if library is None:
        return ""
    limit = "N"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        limit = str(value)
    elif isinstance(value, float) and value.is_integer() and value >= 0:
        limit = str(int(value))
    if marker:
        return f' (did you mean {LIBRARY_LIMIT_KEY}={{"{library}": {limit}}}?)'
    return f" (did you mean {LIBRARY_LIMIT_KEY} = {{ {library} = {limit} }}?)"


def _did_you_mean(
    word: str, choices: Sequence[str], *, value: object = None, marker: bool = False
) -> str:
    """A hint for ``word`` where one of ``choices`` is expected: the platform another name
    means, the library limit a budget key names (where ``max_library_calls`` is a choice;
    ``value`` is the limit written, ``marker`` the marker's syntax), else the closest
    choice."""
    hint = platform_hint(word, choices)
    if not hint and LIBRARY_LIMIT_KEY in choices:
        hint = library_key_hint(word, value, marker=marker)
    if hint:
        return hint
    folded = {c.casefold(): c for c in choices}
    if word.casefold() in folded:
        return f" (did you mean {folded[word.casefold()]!r}?)"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return f"array {list(value)!r}"
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class _Where:
    """Formats error locations: ``pyproject.toml: [tool.jaxport.budget] max_custom_calls``."""

    prefix: str

    def error(self, key: str | None, expected: str, found: object) -> ConfigError:
        where = f"{self.prefix} {key}" if key else self.prefix
        return ConfigError(f"{where}: expected {expected}, found {_type_name(found)}")

    def unknown(
        self, key: str, known: Sequence[str], what: str = "key", value: object = None
    ) -> ConfigError:
        """``key`` is none of ``known``; ``value`` (what it was set to) shapes a hint."""
        return ConfigError(
            f"{self.prefix}: unknown {what} {key!r}{_did_you_mean(key, known, value=value)}; "
            f"known: {', '.join(known)}"
        )


def _limit(where: _Where, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        raise where.error(key, "a non-negative integer", value)
    return value


def _at(where: _Where, key: str) -> str:
    return f"{where.prefix} {key}" if key else where.prefix


def installed_jax() -> str:
    """The installed jax's version (``""`` where none is installed), read from its package
    metadata: JAX itself is not imported."""
    return installed_release("jax")


@functools.cache
def installed_release(distribution: str) -> str:
    """The installed ``distribution``'s version (``""`` where it is not installed), read from
    its package metadata, nothing imported (``libtpu``: the TPU compiler's release)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _platform(where: _Where, key: str, value: object, choices: Sequence[str] = PLATFORMS) -> str:
    if not isinstance(value, str):
        raise where.error(key, f"a platform name (one of {', '.join(choices)})", value)
    if value not in choices:
        raise ConfigError(
            f"{_at(where, key)}: unknown platform {value!r}{_did_you_mean(value, choices)}; "
            f"expected one of {', '.join(choices)}"
        )
    too_old = needs_newer_jax(value, installed_jax())
    if too_old is not None:  # never counts that are silently wrong
        needed = DESCRIPTIONS[value].requires_jax
        raise ConfigError(
            f"{_at(where, key)}: {too_old}; upgrade jax (pip install 'jax>={needed}') "
            f"or leave {value} out"
        )
    return value


def platform_list(where: str, value: object, *, empty_ok: bool = False) -> tuple[str, ...]:
    """Validate a list of platforms (``platforms``, ``--jaxport-platforms``): known
    platforms, each once, each one this JAX lowers for right; ``where`` starts the error.

    >>> platform_list("--jaxport-platforms", ["cpu", "tpu"])
    ('cpu', 'tpu')
    >>> try:
    ...     platform_list("--jaxport-platforms", ["cpu", "tpx"])
    ... except ConfigError as e:
    ...     print(str(e)[:68])
    --jaxport-platforms: unknown platform 'tpx' (did you mean 'tpu'?); e
    """
    return _platforms(_Where(where), "", value, empty_ok=empty_ok)


def _platforms(
    where: _Where, key: str, value: object, *, empty_ok: bool, choices: Sequence[str] = PLATFORMS
) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise where.error(key, f"a list of platforms (from {', '.join(choices)})", value)
    if not value and not empty_ok:
        raise where.error(key, "a non-empty list of platforms", value)
    names = tuple(_platform(where, key, v, choices) for v in value)
    if len(set(names)) != len(names):
        raise where.error(key, "each platform at most once", value)
    return names


def _platform_choice(
    where: str, value: object, choices: Sequence[str], why_not: Mapping[str, str]
) -> tuple[str, ...]:
    """A list of platforms from ``choices``, each once; ``why_not`` says why a known
    platform outside them is not a choice."""
    known = ", ".join(choices)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of platforms (from {known}), found "
                          f"{_type_name(value)}")  # fmt: skip
    names: list[str] = []
    for item in value:
        if not isinstance(item, str) or item not in choices:
            known_why = isinstance(item, str) and item in why_not
            hint = _did_you_mean(item, choices) if isinstance(item, str) and not known_why else ""
            extra = f" ({why_not[item]})" if known_why else ""
            meant = platforms_meant(item) if isinstance(item, str) and not hint else ()
            if not extra and len(meant) == 1 and meant[0] in why_not:  # amd: rocm's reason
                extra = (
                    f" ({PLATFORM_VENDORS[meant[0]]}'s platform is {meant[0]}: {why_not[meant[0]]})"
                )
            raise ConfigError(
                f"{where}: expected platforms from {known}, found {_type_name(item)}{hint}{extra}"
            )
        if item in names:
            raise ConfigError(f"{where}: expected each platform at most once, found "
                              f"{_type_name(list(value))}")  # fmt: skip
        names.append(item)
    return tuple(names)


def compile_platforms(where: str, value: object) -> tuple[str, ...]:
    """Validate a ``compile`` list: platforms from :data:`COMPILE_PLATFORMS`, each once."""
    lowered = [p for p in PLATFORMS if p not in COMPILE_PLATFORMS]
    lowered_only = (
        f"{', '.join(lowered[:-1])} and {lowered[-1]} are counted at the lowered level only"
    )
    return _platform_choice(where, value, COMPILE_PLATFORMS, {p: lowered_only for p in PLATFORMS})


def emulate_platforms(where: str, value: object) -> tuple[str, ...]:
    """Validate an ``emulate`` list: platforms from :data:`EMULATED_PLATFORMS`, each once.

    >>> emulate_platforms("[tool.jaxport] emulate", ["tpu", "cuda"])
    ('tpu', 'cuda')
    """
    return _platform_choice(
        where, value, EMULATED_PLATFORMS, {"cpu": "cpu is executed, never emulated"}
    )


def may_differ_value(where: str, value: object) -> str:
    """Validate ``may_differ``: one of :data:`MAY_DIFFER`.

    >>> may_differ_value("[tool.jaxport] may_differ", "warn")
    'warn'
    """
    if value in MAY_DIFFER:
        return str(value)
    raise ConfigError(
        f"{where}: expected one of {', '.join(repr(c) for c in MAY_DIFFER)} (what an emulation "
        f"that may differ on the chip does to its test), found {value!r}"
    )


def emulated_among(where: str, emulate: Sequence[str], platforms: Sequence[str]) -> None:
    """An emulated platform must be one the checks lower for: its lowering is what the
    emulation runs."""
    outside = [p for p in emulate if p not in platforms]
    if outside:
        raise ConfigError(
            f"{where}: expected platforms among the platforms checks lower for "
            f"({', '.join(platforms)}), found {', '.join(map(repr, outside))}; add "
            f"{'it' if len(outside) == 1 else 'them'} to platforms, or leave "
            f"{'it' if len(outside) == 1 else 'them'} out of emulate"
        )


def gpu_target(where: str, value: object, base: Path | None) -> str:
    """Validate ``target``: a shipped description's name, or a description file's path.

    Returns the lower-case name, or the absolute path (relative paths are taken from
    ``base``, the folder of ``pyproject.toml``).
    """
    shipped = ", ".join(SHIPPED_TARGETS)
    expected = f"a shipped GPU description ({shipped}) or the path of a text GpuTargetConfigProto"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected {expected}, found {_type_name(value)}")
    name = value.strip().lower()
    if name in SHIPPED_TARGETS:
        return name
    path = Path(value).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        load_target(str(path))
    except (ValueError, OSError) as e:
        detail = str(e) if path.is_file() else "no such file"
        raise ConfigError(
            f"{where}: expected {expected}, found {_type_name(value)} ({detail})"
        ) from None
    return str(path.resolve())


def transforms_value(where: str, value: object) -> tuple[str, ...]:
    """Validate a list of transformation names (``["grad", "vmap"]``); ``where`` prefixes
    the error (``pyproject.toml: [tool.jaxport] transforms``)."""
    known = ", ".join(TRANSFORMS)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f'{where}: expected a list of transformations ({known}), e.g. ["grad"], '
            f"found {_type_name(value)}"
        )
    for item in value:
        if not isinstance(item, str) or item not in TRANSFORMS:
            hint = _did_you_mean(item, TRANSFORMS) if isinstance(item, str) else ""
            raise ConfigError(f"{where}: unknown transformation {item!r}{hint}; known: {known}")
    return tuple(dict.fromkeys(value))


def _globs(where: _Where, key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise where.error(key, 'a list of glob patterns (e.g. ["my_kernel_*"])', value)
    for item in value:
        if not isinstance(item, str) or not item:
            raise where.error(key, "non-empty strings only", value)
    return tuple(value)


def _library_limits(where: _Where, key: str, value: object) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise where.error(key, "a table of library = limit (e.g. {cudnn = 0, nccl = 4})", value)
    known = sorted(all_libraries())
    limits: dict[str, int] = {}
    for library, limit in value.items():
        if library not in known:
            raise ConfigError(
                f"{where.prefix} {key}: unknown library {library!r}"
                f"{_did_you_mean(library, known)}; known: {', '.join(known)}"
            )
        limits[library] = _limit(where, f"{key}.{library}", limit)
    return limits


def _tolerance_value(where: _Where, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, "a non-negative number", value)
    if not math.isfinite(value) or value < 0:
        raise where.error(key, "a finite non-negative number", value)
    return float(value)


def _fraction(where: _Where, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise where.error(key, "a fraction between 0 and 1", value)
    return float(value)


def _days(where: _Where, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, "a non-negative number of days", value)
    if not math.isfinite(value) or value < 0:
        raise where.error(key, "a finite non-negative number of days", value)
    return float(value)


def _names(
    where: _Where, key: str, value: object, known: Sequence[str], what: str
) -> tuple[str, ...]:
    """A list of names from ``known`` (a glob may match several), each checked with a
    did-you-mean: ``["float8_e4m3fn"]``, ``["float32-*"]``."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise where.error(key, f"a list of {what}s (e.g. [{known[0]!r}])", value)
    for item in value:
        if not isinstance(item, str) or not item:
            raise where.error(key, f"a list of {what}s", value)
        if not any(fnmatchcase(name, item) for name in known):
            raise ConfigError(
                f"{where.prefix} {key}: unknown {what} {item!r}{_did_you_mean(item, known)}; "
                f"known: {', '.join(known)}"
            )
    return tuple(value)


def _must_be_flag(where: _Where, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise where.error(key, "true or false", value)
    return value


_VALIDATORS: Mapping[Kind, Callable[[_Where, str, object], BudgetValue]] = {
    "count": _limit,
    "fraction": _fraction,
    "days": _days,
    "flag": _must_be_flag,
    "platforms": lambda where, key, value: _platforms(where, key, value, empty_ok=True),
    "globs": _globs,
    "formats": lambda where, key, value: _names(where, key, value, FORMAT_NAMES, "format"),
    "rules": lambda where, key, value: _names(where, key, value, RULE_NAMES, "rule"),
    "libraries": _library_limits,
}
"""How a budget key's value is validated, per its declared kind (the errors name the key)."""
_ANNOTATIONS: Mapping[Kind, str] = {
    "count": "int | None",
    "fraction": "float | None",
    "days": "float | None",
    "flag": "bool | None",
    "platforms": "Sequence[str] | None",
    "globs": "Sequence[str] | None",
    "formats": "Sequence[str] | None",
    "rules": "Sequence[str] | None",
    "libraries": "Mapping[str, int] | None",
}
"""A budget key's type in the marker's signature (``--markers``), per its declared kind."""
assert set(_VALIDATORS) == set(_ANNOTATIONS) == set(get_args(Kind)), "a kind without a validator"


def _budget_value(where: _Where, key: str, value: object) -> BudgetValue:
    """``value`` of the declared budget key ``key``, validated as its kind says."""
    return _VALIDATORS[DECLARED[key].kind](where, key, value)


def _takes_table(key: str) -> bool:
    """Whether the budget key ``key`` takes a table (``max_library_calls``), so a table under
    that name is its value, not a misspelt platform's."""
    return key in DECLARED and DECLARED[key].kind == "libraries"


def _budget_table(source: str, name: str, table: Mapping[str, object]) -> BudgetTable:
    where = _Where(f"{source}: [{name}]")
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
        values[key] = _budget_value(where, key, value)
    return BudgetTable(origin=f"{source} [{name}]", values=values)


def _tolerance_table(source: str, name: str, table: object) -> ToleranceSetting:
    where = _Where(f"{source}: [{name}]")
    if not isinstance(table, Mapping):
        raise _Where(f"{source}: [{name.rsplit('.', 1)[0]}]").error(
            name.rsplit(".", 1)[1], "a table with rtol and/or atol", table
        )
    for key in table:
        if key not in TOLERANCE_KEYS:
            raise where.unknown(key, TOLERANCE_KEYS)
    return ToleranceSetting(
        rtol=_tolerance_value(where, "rtol", table["rtol"]) if "rtol" in table else None,
        atol=_tolerance_value(where, "atol", table["atol"]) if "atol" in table else None,
        origin=f"{source} [{name}]",
    )


def _dtype_tables(
    source: str, name: str, table: Mapping[str, object]
) -> dict[str, ToleranceSetting]:
    where = _Where(f"{source}: [{name}]")
    result = {}
    for dtype, entry in table.items():
        if dtype not in DTYPES:
            raise where.unknown(dtype, DTYPES, what="dtype")
        result[dtype] = _tolerance_table(source, f"{name}.{dtype}", entry)
    return result


def _cost_table(source: str, table: object) -> dict[str, float]:
    if not isinstance(table, Mapping):
        raise _Where(f"{source}: [tool.jaxport]").error("cost", "a table of days", table)
    where = _Where(f"{source}: [tool.jaxport.cost]")
    days = {}
    for key, value in table.items():
        if key not in COST_KEYS:
            raise where.unknown(key, COST_KEYS)
        days[key] = _days(where, key, value)
    return days


def _scan_table(source: str, table: object) -> tuple[bool, tuple[str, ...]]:
    if not isinstance(table, Mapping):
        raise _Where(f"{source}: [tool.jaxport]").error("scan", "a table", table)
    where = _Where(f"{source}: [tool.jaxport.scan]")
    for key in table:
        if key not in SCAN_KEYS:
            raise where.unknown(key, SCAN_KEYS)
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise where.error("enabled", "a boolean (true or false)", enabled)
    exclude = table.get("exclude", [])
    if isinstance(exclude, str):
        exclude = [exclude]
    return enabled, _globs(where, "exclude", exclude) if exclude else ()


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


def migrate_among(where: str, migrate_to: Sequence[str], lowered: Sequence[str]) -> None:
    """A ``migrate_to`` target must be a platform the checks lower for: what a move there
    rewrites is counted on its census, and a target never lowered has none (it would read
    0 to rewrite)."""
    outside = [p for p in migrate_to if p not in lowered]
    if outside:
        them = "it" if len(outside) == 1 else "them"
        raise ConfigError(
            f"{where}: expected platforms among the platforms checks lower for "
            f"({', '.join(lowered)}), found {', '.join(map(repr, outside))}: a target that is "
            f"not lowered has no kernels counted; add {them} to platforms, or leave {them} "
            "out of migrate_to"
        )


def home_platform(where: str, value: object, platforms: Sequence[str]) -> str:
    """``[tool.jaxport] home``: a known platform among the configured ``platforms`` (the
    platform moving is measured from needs its census); ``where`` starts the error.

    >>> home_platform("pyproject.toml: [tool.jaxport]", "tpu", ("cpu", "cuda", "tpu"))
    'tpu'
    >>> try:
    ...     home_platform("pyproject.toml: [tool.jaxport]", "tpu", ("cpu", "cuda"))
    ... except ConfigError as e:
    ...     print(e)  # doctest: +NORMALIZE_WHITESPACE
    pyproject.toml: [tool.jaxport] home: expected one of the configured platforms (cpu,
    cuda), found 'tpu': moving is measured from home's census, so add 'tpu' to platforms
    """
    home = _platform(_Where(where), "home", value)
    if home not in platforms:
        raise ConfigError(
            f"{where} home: expected one of the configured platforms ({', '.join(platforms)}), "
            f"found {home!r}: moving is measured from home's census, so add {home!r} to "
            "platforms"
        )
    return home


def parse_project(
    data: Mapping[str, object], source: str, *, base: Path | None = None
) -> ProjectConfig:
    """Validate the ``[tool.jaxport]`` table read from ``source`` (in folder ``base``)."""
    where = _Where(f"{source}: [tool.jaxport]")
    for key in data:
        if key not in TOP_KEYS:
            raise where.unknown(key, TOP_KEYS)
    platforms = (
        _platforms(where, "platforms", data["platforms"], empty_ok=False)
        if "platforms" in data
        else DEFAULT_PLATFORMS
    )
    reference = (
        _platform(where, "reference", data["reference"])
        if "reference" in data
        else DEFAULT_REFERENCE
    )
    if reference not in platforms:
        raise ConfigError(
            f"{source}: [tool.jaxport] reference: expected one of the configured platforms "
            f"({', '.join(platforms)}), found {reference!r}"
        )
    compile_for = (
        compile_platforms(f"{where.prefix} compile", data["compile"]) if "compile" in data else ()
    )
    time_limit = data.get("compile_time_limit", DEFAULT_COMPILE_TIME_LIMIT)
    if (
        not isinstance(time_limit, (int, float))
        or isinstance(time_limit, bool)
        or not time_limit > 0
    ):
        raise where.error(
            "compile_time_limit", "a number of seconds greater than 0 (e.g. 60)", time_limit
        )
    target = (
        gpu_target(f"{where.prefix} target", data["target"], base)
        if "target" in data
        else DEFAULT_TARGET
    )
    what_if = data.get("what_if_no_vendor", False)
    if not isinstance(what_if, bool):
        raise where.error("what_if_no_vendor", "a boolean (true or false)", what_if)
    home = home_platform(where.prefix, data["home"], platforms) if "home" in data else DEFAULT_HOME
    migrate_to: tuple[str, ...] | None = None  # the default follows what is lowered, below
    if "migrate_to" in data:
        raw = data["migrate_to"]
        targets = migrate_targets(home)
        homes = [
            v for v in raw if isinstance(v, str) and platforms_meant(v) == (home,)
        ] if isinstance(raw, list) else []  # fmt: skip
        if homes:  # the home, or another name for it (nvidia for cuda)
            vendor = PLATFORM_VENDORS[home].removeprefix("the ")
            raise ConfigError(
                f"{where.prefix} migrate_to: expected non-{vendor} targets "
                f"({', '.join(targets)}): the cost model prices moving off {home}, the home "
                f"platform ([tool.jaxport] home), found {homes[0]!r}"
            )
        migrate_to = _platforms(
            where, "migrate_to", raw, empty_ok=True, choices=ordered_platforms(targets)
        )
    cost = _cost_table(source, data.get("cost", {}))
    transforms = (
        transforms_value(f"{where.prefix} transforms", data["transforms"])
        if "transforms" in data
        else ()
    )
    scan, scan_exclude = _scan_table(source, data.get("scan", {}))
    devices = _devices_table(source, data["devices"]) if "devices" in data else {}
    emulate = None
    if "emulate" in data:
        emulated = emulate_platforms(f"{where.prefix} emulate", data["emulate"])
        emulated_among(f"{where.prefix} emulate", emulated, platforms)
        emulate = Setting(value=emulated, origin=f"{source} [tool.jaxport]") if emulated else None
    own_packages = _package_names(where, "own_packages", data.get("own_packages", []))
    may_differ = ProjectConfig().may_differ
    if "may_differ" in data:
        may_differ = Setting(value=may_differ_value(f"{where.prefix} may_differ",
                                                    data["may_differ"]),
                             origin=f"{source} [tool.jaxport]")  # fmt: skip

    raw_budget = data.get("budget", {})
    budget, platform_budgets = _budget_section(source, "tool.jaxport.budget", raw_budget)
    audit = _audit_table(source, data["audit"]) if "audit" in data else AuditConfig()

    tolerances: dict[str, ToleranceSetting] = {}
    platform_tolerances: dict[str, dict[str, ToleranceSetting]] = {}
    raw_tolerance = data.get("tolerance", {})
    if not isinstance(raw_tolerance, Mapping):
        raise where.error("tolerance", "a table ([tool.jaxport.tolerance.<dtype>])", raw_tolerance)
    dtype_entries = {}
    for key, value in raw_tolerance.items():
        if key in PLATFORMS:
            if not isinstance(value, Mapping):
                raise _Where(f"{source}: [tool.jaxport.tolerance]").error(
                    key, f"a table ([tool.jaxport.tolerance.{key}.<dtype>])", value
                )
            platform_tolerances[key] = _dtype_tables(source, f"tool.jaxport.tolerance.{key}", value)
        elif key in DTYPES:
            dtype_entries[key] = value
        else:
            raise _Where(f"{source}: [tool.jaxport.tolerance]").unknown(
                key, (*DTYPES, *PLATFORMS), what="dtype or platform"
            )
    tolerances = _dtype_tables(source, "tool.jaxport.tolerance", dtype_entries)
    project = ProjectConfig(
        source=source,
        platforms=platforms,
        reference=reference,
        compile=compile_for,
        compile_time_limit=float(time_limit),
        target=target,
        what_if_no_vendor=what_if,
        home=home,
        cost=cost,
        scan=scan,
        scan_exclude=scan_exclude,
        budget=budget,
        platform_budgets=platform_budgets,
        tolerances=tolerances,
        platform_tolerances=platform_tolerances,
        transforms=transforms,
        audit=audit,
        devices=devices,
        emulate=emulate,
        may_differ=may_differ,
        own_packages=own_packages,
    )
    budgets_lowered(source, project)
    lowered = project.lowered()
    if migrate_to is None:
        return replace(project, migrate_to=default_migrate_to(lowered, home))
    migrate_among(f"{where.prefix} migrate_to", migrate_to, lowered)
    return replace(project, migrate_to=migrate_to, migrate_to_set=True)


def _devices_table(source: str, table: object) -> dict[str, Device]:
    """``devices = { rocm = "mi300", tpu = "v6e" }``: the device the formats-and-layout rules
    judge each platform for."""
    if not isinstance(table, Mapping):
        raise _Where(f"{source}: [tool.jaxport]").error(
            "devices", 'a table of platform = device (e.g. { rocm = "mi300", tpu = "v6e" })', table
        )
    where = _Where(f"{source}: [tool.jaxport] devices.")
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
            raise _Where(f"{source}: [tool.jaxport] devices").unknown(
                platform, DEVICE_PLATFORMS, what="platform"
            )
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(
                f"{where.prefix}{platform}: expected a device name (e.g. "
                f"{DESCRIPTIONS[platform].device_example}), found {_type_name(name)}"
            )
        name, _, shape = name.partition(":")
        try:
            devices[platform] = device_for(platform, name)
        except ValueError:
            known = sorted(
                {n for n, d in DEVICE_NAMES.items() if d.platform == platform}
                | set(GENERATIONS[platform])
            )
            raise ConfigError(
                f"{where.prefix}{platform}: unknown {platform} device {name!r}"
                f"{_did_you_mean(name.strip().lower(), known)}; expected one of: "
                f"{', '.join(known)}"
            ) from None
        if shape:
            devices[platform] = _with_topology(where, platform, devices[platform], shape.strip())
    return devices


def _with_topology(where: _Where, platform: str, device: Device, shape: str) -> Device:
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


def _package_names(where: _Where, key: str, value: object) -> tuple[str, ...]:
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
        raise _Where(f"{source}: [{parent}]").error(key, f"a table ([{name}])", raw)
    common = {}
    budget_where = _Where(f"{source}: [{name}]")
    for key, value in raw.items():
        if key in PLATFORMS:
            if not isinstance(value, Mapping):
                raise budget_where.error(key, f"a table ([{name}.{key}])", value)
            platform_budgets[key] = _budget_table(source, f"{name}.{key}", value)
            _libraries_of(source, f"{name}.{key}", key, platform_budgets[key])
        elif isinstance(value, Mapping) and not _takes_table(key):
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


def _audit_table(source: str, value: object) -> AuditConfig:
    """``audit = true`` or ``[tool.jaxport.audit]`` (``enabled``, ``eager_users``,
    ``fail_on``)."""
    if isinstance(value, bool):
        return AuditConfig(enabled=value)
    if not isinstance(value, Mapping):
        raise _Where(f"{source}: [tool.jaxport]").error(
            "audit", "a boolean (true or false) or a table ([tool.jaxport.audit])", value
        )
    where = _Where(f"{source}: [tool.jaxport.audit]")
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
    )


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
        raise _Where(f"{source}: [tool]").error("jaxport", "a table ([tool.jaxport])", section)
    return parse_project(section, source, base=path.parent)


# -- the marker ---------------------------------------------------------------------------


_MARKER_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in (
            *((k.name, _ANNOTATIONS[k.kind]) for k in KEYS if k.marker),
            *MARKER_OPTIONS,
        )
    ],
    return_annotation="dict[str, object]",
)


def portable(**keywords: object) -> dict[str, object]:
    """Portability budget for this test's ``jaxport.check`` calls; keywords override pyproject.

    Its signature is the marker's, made from the declared budget keys and
    :data:`MARKER_OPTIONS`: pytest's ``--markers`` help is generated from it, and the
    marker's keywords are validated by calling it (an unknown one is a ``TypeError``).
    """
    given = _MARKER_SIGNATURE.bind(**keywords).arguments
    return {k: v for k, v in given.items() if v is not None}


portable.__signature__ = _MARKER_SIGNATURE  # type: ignore[attr-defined]


def parse_marker(
    args: Sequence[object], kwargs: Mapping[str, object], origin: str
) -> dict[str, object]:
    """Validate one ``portable`` mark's arguments; raise ConfigError naming the culprit."""
    where = _Where(f"@pytest.mark.portable on {origin}:")
    if args:
        raise ConfigError(
            f"{where.prefix} takes keyword arguments only, found positional "
            f"{', '.join(repr(a) for a in args)}; e.g. portable(max_custom_calls=0)"
        )
    for key in kwargs:
        if key not in MARKER_KEYS:
            raise ConfigError(
                f"{where.prefix} unknown keyword {key!r}"
                f"{_did_you_mean(key, MARKER_KEYS, value=kwargs[key], marker=True)}; "
                f"known: {', '.join(MARKER_KEYS)}"
            )
    values = portable(**kwargs)
    result: dict[str, object] = {}
    for key, value in values.items():
        if key in BUDGET_KEYS:
            result[key] = _budget_value(where, key, value)
        elif key == "platforms":
            result[key] = _platforms(where, key, value, empty_ok=False)
        elif key == "reference":
            result[key] = _platform(where, key, value)
        elif key == "transforms":
            result[key] = transforms_value(f"{where.prefix} transforms", value)
        elif key == "emulate":
            result[key] = emulate_platforms(f"{where.prefix} emulate", value)
        elif key == "may_differ":
            result[key] = may_differ_value(f"{where.prefix} may_differ", value)
        else:
            result[key] = _tolerance_value(where, key, value)
    return result


def merge_marks(marks: Sequence[tuple[str, Mapping[str, object]]]) -> Overrides:
    """Closest mark first: for each key the closest mark that sets it wins."""
    values: dict[str, Setting[Any]] = {}
    for origin, parsed in marks:
        for key, value in parsed.items():
            values.setdefault(key, Setting(value=value, origin=origin))
    return Overrides(values=values)
