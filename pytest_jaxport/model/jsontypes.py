"""The JSON types a report's parts are written as and read from (pure), declared once.

:data:`Json` is a JSON value as :func:`json.loads` gives it; :data:`JsonObject` is what a
``to_dict`` gives (a table only serialized: its values are not read back as typed fields),
and :data:`JsonMapping` what a ``from_dict`` takes. A ``from_dict`` reads a field through
the narrowing helpers here (:func:`text`, :func:`integer`, :func:`table`, ...), which check
its type and raise :class:`TypeError` naming the key where it is not what the field needs:
the report's reader (:mod:`pytest_jaxport.report.document`) has already checked a file's
fields by their place, so these only stand between ``object`` and the typed value.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import TypeVar

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]
"""A JSON value, as :func:`json.loads` gives it."""

JsonObject = dict[str, object]
"""A JSON object as a ``to_dict`` writes it: only serialized (:func:`json.dumps`), so its
values are ``object``; where one is read, it is narrowed (:func:`table`, :func:`text`, ...)."""

JsonMapping = Mapping[str, object]
"""A JSON object as a ``from_dict`` (or any reader of a report's JSON) takes it."""

_T = TypeVar("_T")
_MISSING = object()


def _wrong(key: str, expected: str, value: object) -> TypeError:
    return TypeError(f"{key}: expected {expected}, found {value!r}")


def _field(data: JsonMapping, key: str, default: object) -> object:
    if key in data:
        return data[key]
    if default is _MISSING:
        raise KeyError(key)
    return default


def as_table(value: object, key: str = "value") -> JsonMapping:
    """``value`` as a JSON object (a :class:`TypeError` naming ``key`` otherwise)."""
    if not isinstance(value, Mapping):
        raise _wrong(key, "a table", value)
    return value


def as_list(value: object, key: str = "value") -> Sequence[object]:
    """``value`` as a JSON list (a tuple too: what this package built before writing)."""
    if not isinstance(value, list | tuple):
        raise _wrong(key, "a list", value)
    return value


def table(data: JsonMapping, key: str, default: object = _MISSING) -> JsonMapping:
    """``data[key]``, a table; absent (or ``null``) is ``{}`` where ``default`` is given."""
    value = _field(data, key, default)
    if value is None and default is not _MISSING:
        return {}
    return as_table(value, key)


def opt_table(data: JsonMapping, key: str) -> JsonMapping | None:
    """``data[key]``, a table, or ``None`` where it is absent, ``null`` or empty."""
    value = data.get(key)
    return as_table(value, key) if value else None


def items(data: JsonMapping, key: str, default: object = _MISSING) -> Sequence[object]:
    """``data[key]``, a list; absent (or ``null``) is ``()`` where ``default`` is given."""
    value = _field(data, key, default)
    if value is None and default is not _MISSING:
        return ()
    return as_list(value, key)


def tables(data: JsonMapping, key: str, default: object = _MISSING) -> list[JsonMapping]:
    """``data[key]``, a list of tables."""
    return [as_table(v, f"{key}[{i}]") for i, v in enumerate(items(data, key, default))]


def text(data: JsonMapping, key: str, default: object = _MISSING) -> str:
    value = _field(data, key, default)
    if not isinstance(value, str):
        raise _wrong(key, "a string", value)
    return value


def opt_text(data: JsonMapping, key: str) -> str | None:
    """``data[key]``, a string, or ``None`` where absent or ``null``."""
    value = data.get(key)
    return None if value is None else text(data, key)


def integer(data: JsonMapping, key: str, default: object = _MISSING) -> int:
    value = _field(data, key, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _wrong(key, "an integer", value)
    return int(value)


def opt_integer(data: JsonMapping, key: str) -> int | None:
    value = data.get(key)
    return None if value is None else integer(data, key)


def number(data: JsonMapping, key: str, default: object = _MISSING) -> float:
    """``data[key]``, an integer or a float, as it is (an integer stays one)."""
    value = _field(data, key, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _wrong(key, "a number", value)
    return value if isinstance(value, int | float) else float(value)


def opt_number(data: JsonMapping, key: str) -> float | None:
    value = data.get(key)
    return None if value is None else number(data, key)


def flag(data: JsonMapping, key: str, default: object = _MISSING) -> bool:
    value = _field(data, key, default)
    if not isinstance(value, bool):
        raise _wrong(key, "true or false", value)
    return value


def texts(data: JsonMapping, key: str, default: object = _MISSING) -> tuple[str, ...]:
    """``data[key]``, a list of strings (absent or ``null``: ``()`` where ``default`` is
    given)."""
    found = items(data, key, default)
    for i, value in enumerate(found):
        if not isinstance(value, str):
            raise _wrong(f"{key}[{i}]", "a string", value)
    return tuple(str(v) for v in found)


def counts(data: JsonMapping, key: str, default: object = _MISSING) -> dict[str, int]:
    """``data[key]``, a table of integers (absent or ``null``: ``{}`` where ``default`` is
    given)."""
    found = table(data, key, default)
    return {str(name): integer(found, name) for name in found}


def numbers_of(data: JsonMapping, key: str, default: object = _MISSING) -> dict[str, float]:
    """``data[key]``, a table of numbers (absent or ``null``: ``{}`` where ``default`` is
    given)."""
    found = table(data, key, default)
    return {str(name): number(found, name) for name in found}


def of_type(value: object, kind: type[_T], key: str = "value") -> _T:
    """``value`` narrowed to ``kind`` (a :class:`TypeError` naming ``key`` otherwise)."""
    if not isinstance(value, kind):
        raise _wrong(key, f"a {kind.__name__}", value)
    return value
