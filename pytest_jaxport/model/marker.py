"""``@pytest.mark.portable(...)``: the marker's keywords, its signature (what ``--markers``
says and what validates a mark's keywords), and each test's closest marks merged.

Example::

    >>> parse_marker((), {"max_custom_calls": 0}, "test_model.py::test_step")
    {'max_custom_calls': 0}

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import get_args

from pytest_jaxport.model.budget import KEYS, Kind
from pytest_jaxport.model.config import BUDGET_KEYS, ConfigError, Overrides, Setting
from pytest_jaxport.model.hints import did_you_mean
from pytest_jaxport.model.validators import (
    Where,
    budget_value,
    emulate_platforms,
    may_differ_value,
    platform_value,
    platforms_value,
    tolerance_value,
    transforms_value,
)

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
    "memory": "float | str | None",
}
"""A budget key's type in the marker's signature (``--markers``), per its declared kind."""
assert set(_ANNOTATIONS) == set(get_args(Kind)), "a kind without its type in the signature"


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
    where = Where(f"@pytest.mark.portable on {origin}:")
    if args:
        raise ConfigError(
            f"{where.prefix} takes keyword arguments only, found positional "
            f"{', '.join(repr(a) for a in args)}; e.g. portable(max_custom_calls=0)"
        )
    for key in kwargs:
        if key not in MARKER_KEYS:
            raise ConfigError(
                f"{where.prefix} unknown keyword {key!r}"
                f"{did_you_mean(key, MARKER_KEYS, value=kwargs[key], marker=True)}; "
                f"known: {', '.join(MARKER_KEYS)}"
            )
    values = portable(**kwargs)
    result: dict[str, object] = {}
    for key, value in values.items():
        if key in BUDGET_KEYS:
            result[key] = budget_value(where, key, value)
        elif key == "platforms":
            result[key] = platforms_value(where, key, value, empty_ok=False)
        elif key == "reference":
            result[key] = platform_value(where, key, value)
        elif key == "transforms":
            result[key] = transforms_value(f"{where.prefix} transforms", value)
        elif key == "emulate":
            result[key] = emulate_platforms(f"{where.prefix} emulate", value)
        elif key == "may_differ":
            result[key] = may_differ_value(f"{where.prefix} may_differ", value)
        else:
            result[key] = tolerance_value(where, key, value)
    return result


def merge_marks(marks: Sequence[tuple[str, Mapping[str, object]]]) -> Overrides:
    """Closest mark first: for each key the closest mark that sets it wins."""
    values: dict[str, Setting[object]] = {}
    for origin, parsed in marks:
        for key, value in parsed.items():
            values.setdefault(key, Setting(value=value, origin=origin))
    return Overrides(values=values)
