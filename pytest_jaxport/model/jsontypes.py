"""The JSON types a report's parts are written as and read from (pure), declared once.

:data:`Json` is a JSON value as :func:`json.loads` gives it; :data:`JsonObject` is what a
``to_dict`` gives (a table only serialized: its values are not read back as typed fields),
and :data:`JsonMapping` what a ``from_dict`` takes. A ``from_dict`` reads a field through
the readers here (:func:`read_text`, :func:`read_integer`, :func:`read_table`, ...), which
check its type and raise :class:`TypeError` naming the key where it is not what the field
needs: the report's reader (:class:`pytest_jaxport.report.reader.Reader`) has already checked
a file's fields by their place, so these only stand between ``object`` and the typed value.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import cast

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]
"""A JSON value, as :func:`json.loads` gives it."""

JsonObject = dict[str, object]
"""A JSON object as a ``to_dict`` writes it: only serialized (:func:`json.dumps`), so its
values are ``object``; where one is read, it is narrowed (:func:`read_table`, ...)."""

JsonMapping = Mapping[str, object]
"""A JSON object as a ``from_dict`` (or any reader of a report's JSON) takes it."""

_MISSING = object()


def put_optional(data: dict[str, Json], key: str, value: Json) -> None:
    """An optional key of a ``to_dict``: written only where it has a value.

    >>> data: dict[str, Json] = {}
    >>> put_optional(data, "note", None); put_optional(data, "leg", "gpu.json"); data
    {'leg': 'gpu.json'}
    """
    if value is not None:
        data[key] = value


def as_json(value: object) -> Json:
    """A domain type's ``to_dict`` (typed loosely there, :data:`JsonObject`) as :data:`Json`."""
    return cast(Json, value)


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


def read_table(data: JsonMapping, key: str, default: object = _MISSING) -> JsonMapping:
    """``data[key]``, a table; absent (or ``null``) is ``{}`` where ``default`` is given."""
    value = _field(data, key, default)
    if value is None and default is not _MISSING:
        return {}
    return as_table(value, key)


def read_opt_table(data: JsonMapping, key: str) -> JsonMapping | None:
    """``data[key]``, a table, or ``None`` where it is absent, ``null`` or empty."""
    value = data.get(key)
    return as_table(value, key) if value else None


def read_items(data: JsonMapping, key: str, default: object = _MISSING) -> Sequence[object]:
    """``data[key]``, a list; absent (or ``null``) is ``()`` where ``default`` is given."""
    value = _field(data, key, default)
    if value is None and default is not _MISSING:
        return ()
    return as_list(value, key)


def read_tables(data: JsonMapping, key: str, default: object = _MISSING) -> list[JsonMapping]:
    """``data[key]``, a list of tables."""
    return [as_table(v, f"{key}[{i}]") for i, v in enumerate(read_items(data, key, default))]


def read_text(data: JsonMapping, key: str, default: object = _MISSING) -> str:
    """``data[key]``, a string (absent: ``default`` where given)."""
    value = _field(data, key, default)
    if not isinstance(value, str):
        raise _wrong(key, "a string", value)
    return value


def read_opt_text(data: JsonMapping, key: str) -> str | None:
    """``data[key]``, a string, or ``None`` where absent or ``null``."""
    value = data.get(key)
    return None if value is None else read_text(data, key)


def read_integer(data: JsonMapping, key: str, default: object = _MISSING) -> int:
    """``data[key]``, an integer, never a bool (absent: ``default`` where given)."""
    value = _field(data, key, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _wrong(key, "an integer", value)
    return int(value)


def read_number(data: JsonMapping, key: str, default: object = _MISSING) -> float:
    """``data[key]``, an integer or a float, as it is (an integer stays one)."""
    value = _field(data, key, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _wrong(key, "a number", value)
    return value if isinstance(value, int | float) else float(value)


def read_flag(data: JsonMapping, key: str, default: object = _MISSING) -> bool:
    """``data[key]``, true or false (absent: ``default`` where given)."""
    value = _field(data, key, default)
    if not isinstance(value, bool):
        raise _wrong(key, "true or false", value)
    return value


def read_texts(data: JsonMapping, key: str, default: object = _MISSING) -> tuple[str, ...]:
    """``data[key]``, a list of strings (absent or ``null``: ``()`` where ``default`` is
    given)."""
    found = read_items(data, key, default)
    for i, value in enumerate(found):
        if not isinstance(value, str):
            raise _wrong(f"{key}[{i}]", "a string", value)
    return tuple(str(v) for v in found)


def read_counts(data: JsonMapping, key: str, default: object = _MISSING) -> dict[str, int]:
    """``data[key]``, a table of integers (absent or ``null``: ``{}`` where ``default`` is
    given)."""
    found = read_table(data, key, default)
    return {str(name): read_integer(found, name) for name in found}
