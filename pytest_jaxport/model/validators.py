"""One validator per kind of configuration value, each error naming where the value was
written, what was expected and what was found: platforms, lists of platforms, counts,
fractions, days, globs, formats, rules, library limits, tolerances, transformations, the GPU
description. ``[tool.jaxport]`` (:mod:`pytest_jaxport.model.pyproject`), the marker
(:mod:`pytest_jaxport.model.marker`) and the command line read their values through these.

Example::

    >>> platform_list("--jaxport-platforms", ["cpu", "tpu"])
    ('cpu', 'tpu')

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import get_args

from pytest_jaxport.model.budget import DECLARED, Kind
from pytest_jaxport.model.classification import all_libraries
from pytest_jaxport.model.config import (
    COMPILE_PLATFORMS,
    FORMAT_NAMES,
    MAY_DIFFER,
    RULE_NAMES,
    TRANSFORMS,
    BudgetValue,
    ConfigError,
)
from pytest_jaxport.model.emulation import EMULATED_PLATFORMS
from pytest_jaxport.model.gpu import SHIPPED_GPUS, load_gpu_description
from pytest_jaxport.model.hints import did_you_mean, platforms_meant
from pytest_jaxport.model.memory import MemoryLimit, parse_memory_limit
from pytest_jaxport.model.platforms import (
    DESCRIPTIONS,
    PLATFORM_VENDORS,
    PLATFORMS,
    installed_jax,
    needs_newer_jax,
)


def type_name(value: object) -> str:
    """What an error says it found: ``string 'tpx'``, ``int 3``, ``boolean true``, ``a table``.

    >>> type_name("tpx"), type_name(3), type_name(True), type_name({})
    ("string 'tpx'", 'int 3', 'boolean true', 'a table')
    """
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
class Where:
    """Formats error locations: ``pyproject.toml: [tool.jaxport.budget] max_custom_calls``."""

    prefix: str

    def error(self, key: str | None, expected: str, found: object) -> ConfigError:
        where = f"{self.prefix} {key}" if key else self.prefix
        return ConfigError(f"{where}: expected {expected}, found {type_name(found)}")

    def unknown(
        self, key: str, known: Sequence[str], what: str = "key", value: object = None
    ) -> ConfigError:
        """``key`` is none of ``known``; ``value`` (what it was set to) shapes a hint."""
        return ConfigError(
            f"{self.prefix}: unknown {what} {key!r}{did_you_mean(key, known, value=value)}; "
            f"known: {', '.join(known)}"
        )


def _limit(where: Where, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        raise where.error(key, "a non-negative integer", value)
    return value


def _at(where: Where, key: str) -> str:
    return f"{where.prefix} {key}" if key else where.prefix


def platform_value(
    where: Where, key: str, value: object, choices: Sequence[str] = PLATFORMS
) -> str:
    """One platform from ``choices``, one this JAX lowers for right (``reference``)."""
    if not isinstance(value, str):
        raise where.error(key, f"a platform name (one of {', '.join(choices)})", value)
    if value not in choices:
        raise ConfigError(
            f"{_at(where, key)}: unknown platform {value!r}{did_you_mean(value, choices)}; "
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
    return platforms_value(Where(where), "", value, empty_ok=empty_ok)


def platforms_value(
    where: Where, key: str, value: object, *, empty_ok: bool, choices: Sequence[str] = PLATFORMS
) -> tuple[str, ...]:
    """A list of platforms from ``choices``, each once (``platforms``, ``migrate_to``,
    ``must_lower``); empty only where ``empty_ok``."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise where.error(key, f"a list of platforms (from {', '.join(choices)})", value)
    if not value and not empty_ok:
        raise where.error(key, "a non-empty list of platforms", value)
    names = tuple(platform_value(where, key, v, choices) for v in value)
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
                          f"{type_name(value)}")  # fmt: skip
    names: list[str] = []
    for item in value:
        if not isinstance(item, str) or item not in choices:
            known_why = isinstance(item, str) and item in why_not
            hint = did_you_mean(item, choices) if isinstance(item, str) and not known_why else ""
            extra = f" ({why_not[item]})" if known_why else ""
            meant = platforms_meant(item) if isinstance(item, str) and not hint else ()
            if not extra and len(meant) == 1 and meant[0] in why_not:  # amd: rocm's reason
                extra = (
                    f" ({PLATFORM_VENDORS[meant[0]]}'s platform is {meant[0]}: {why_not[meant[0]]})"
                )
            raise ConfigError(
                f"{where}: expected platforms from {known}, found {type_name(item)}{hint}{extra}"
            )
        if item in names:
            raise ConfigError(f"{where}: expected each platform at most once, found "
                              f"{type_name(list(value))}")  # fmt: skip
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


def growth_value(where: str, value: object) -> float:
    """Validate ``memory_growth`` (and ``jaxport diff --memory-growth``): a share, 0 or more,
    that a check's planned device memory may grow by before the growth is flagged (``0.1``:
    past 10%; ``0``: any growth).

    >>> growth_value("[tool.jaxport] memory_growth", 0.25)
    0.25
    >>> try:
    ...     growth_value("memory_growth", "10%")
    ... except ConfigError as e:
    ...     print(str(e).partition(", found ")[2])
    string '10%' (write 0.1)
    """
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        return float(value)
    hint = ""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:  # what was meant: the share, not the percentage
            hint = f" (write {float(value.strip().removesuffix('%')) / 100:g})"
        except ValueError:
            hint = ""
    raise ConfigError(
        f"{where}: expected a share of the base's planned memory, 0 or more (0.1: growth past "
        f"10% is flagged), found {type_name(value)}{hint}"
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


def compiled_among(where: str, compile: Sequence[str], lowered: Sequence[str]) -> None:
    """A compiled platform must be one the checks lower for: its lowering is what compiles.

    >>> try:
    ...     compiled_among("--jaxport-compile", ["tpu"], ["cpu", "cuda"])
    ... except ConfigError as e:
    ...     print(str(e).partition(" (")[0])
    --jaxport-compile: expected platforms among the platforms checks lower for
    """
    outside = [p for p in compile if p not in lowered]
    if outside:
        them = "it" if len(outside) == 1 else "them"
        raise ConfigError(
            f"{where}: expected platforms among the platforms checks lower for "
            f"({', '.join(lowered)}), found {', '.join(map(repr, outside))}; add {them} to "
            f"platforms, or leave {them} out of compile"
        )


def gpu_value(where: str, value: object, base: Path | None) -> str:
    """Validate ``target``: a shipped description's name, or a description file's path.

    Returns the lower-case name, or the absolute path (relative paths are taken from
    ``base``, the folder of ``pyproject.toml``).
    """
    shipped = ", ".join(SHIPPED_GPUS)
    expected = f"a shipped GPU description ({shipped}) or the path of a text GpuTargetConfigProto"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected {expected}, found {type_name(value)}")
    name = value.strip().lower()
    if name in SHIPPED_GPUS:
        return name
    path = Path(value).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        load_gpu_description(str(path))
    except (ValueError, OSError) as e:
        detail = str(e) if path.is_file() else "no such file"
        raise ConfigError(
            f"{where}: expected {expected}, found {type_name(value)} ({detail})"
        ) from None
    return str(path.resolve())


def transforms_value(where: str, value: object) -> tuple[str, ...]:
    """Validate a list of transformation names (``["grad", "vmap"]``); ``where`` prefixes
    the error (``pyproject.toml: [tool.jaxport] transforms``)."""
    known = ", ".join(TRANSFORMS)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f'{where}: expected a list of transformations ({known}), e.g. ["grad"], '
            f"found {type_name(value)}"
        )
    for item in value:
        if not isinstance(item, str) or item not in TRANSFORMS:
            hint = did_you_mean(item, TRANSFORMS) if isinstance(item, str) else ""
            raise ConfigError(f"{where}: unknown transformation {item!r}{hint}; known: {known}")
    return tuple(dict.fromkeys(value))


def globs_value(where: Where, key: str, value: object) -> tuple[str, ...]:
    """A list of glob patterns (``allow_targets``, ``[tool.jaxport.scan] exclude``)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise where.error(key, 'a list of glob patterns (e.g. ["my_kernel_*"])', value)
    for item in value:
        if not isinstance(item, str) or not item:
            raise where.error(key, "non-empty strings only", value)
    return tuple(value)


def _library_limits(where: Where, key: str, value: object) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise where.error(key, "a table of library = limit (e.g. {cudnn = 0, nccl = 4})", value)
    known = sorted(all_libraries())
    limits: dict[str, int] = {}
    for library, limit in value.items():
        if library not in known:
            raise ConfigError(
                f"{where.prefix} {key}: unknown library {library!r}"
                f"{did_you_mean(library, known)}; known: {', '.join(known)}"
            )
        limits[library] = _limit(where, f"{key}.{library}", limit)
    return limits


def tolerance_value(where: Where, key: str, value: object) -> float:
    """A finite non-negative ``rtol`` or ``atol``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, "a non-negative number", value)
    if not math.isfinite(value) or value < 0:
        raise where.error(key, "a finite non-negative number", value)
    return float(value)


def _fraction(where: Where, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise where.error(key, "a fraction between 0 and 1", value)
    return float(value)


def days_value(where: Where, key: str, value: object) -> float:
    """A finite non-negative number of engineering days (``[tool.jaxport.cost]``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, "a non-negative number of days", value)
    if not math.isfinite(value) or value < 0:
        raise where.error(key, "a finite non-negative number of days", value)
    return float(value)


def _names(
    where: Where, key: str, value: object, known: Sequence[str], what: str
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
                f"{where.prefix} {key}: unknown {what} {item!r}{did_you_mean(item, known)}; "
                f"known: {', '.join(known)}"
            )
    return tuple(value)


def memory_limit_value(where: Where, key: str, value: object) -> MemoryLimit:
    """``max_device_memory``: a fraction of the device's capacity in (0, 1] or a size with its
    unit spelled out (``"12 GiB"``, ``"500 MB"``).

    >>> memory_limit_value(Where("[tool.jaxport.budget]"), "max_device_memory", "12 GiB").size
    12884901888
    >>> try:
    ...     memory_limit_value(Where("[tool.jaxport.budget]"), "max_device_memory", "12")
    ... except ConfigError as e:
    ...     print(str(e)[:92])
    [tool.jaxport.budget] max_device_memory: a size needs its unit: "12" is ambiguous; write "12
    """
    try:
        return parse_memory_limit(value)
    except ValueError as e:
        problem = str(e)
    raise ConfigError(f"{_at(where, key)}: {problem}, found {type_name(value)}")


def _must_be_flag(where: Where, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise where.error(key, "true or false", value)
    return value


_VALIDATORS: Mapping[Kind, Callable[[Where, str, object], BudgetValue]] = {
    "count": _limit,
    "fraction": _fraction,
    "days": days_value,
    "flag": _must_be_flag,
    "platforms": lambda where, key, value: platforms_value(where, key, value, empty_ok=True),
    "globs": globs_value,
    "formats": lambda where, key, value: _names(where, key, value, FORMAT_NAMES, "format"),
    "rules": lambda where, key, value: _names(where, key, value, RULE_NAMES, "rule"),
    "libraries": _library_limits,
    "memory": memory_limit_value,
}

assert set(_VALIDATORS) == set(get_args(Kind)), "a kind without a validator"


def budget_value(where: Where, key: str, value: object) -> BudgetValue:
    """``value`` of the declared budget key ``key``, validated as its kind says."""
    return _VALIDATORS[DECLARED[key].kind](where, key, value)


def takes_table(key: str) -> bool:
    """Whether the budget key ``key`` takes a table (``max_library_calls``), so a table under
    that name is its value, not a misspelt platform's."""
    return key in DECLARED and DECLARED[key].kind == "libraries"


def migrate_among(where: str, migrate_to: Sequence[str], lowered: Sequence[str]) -> None:
    """A ``migrate_to`` destination must be a platform the checks lower for: what a move there
    rewrites is counted on its census, and a destination never lowered has none (it would
    read 0 to rewrite)."""
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
    home = platform_value(Where(where), "home", value)
    if home not in platforms:
        raise ConfigError(
            f"{where} home: expected one of the configured platforms ({', '.join(platforms)}), "
            f"found {home!r}: moving is measured from home's census, so add {home!r} to "
            "platforms"
        )
    return home
