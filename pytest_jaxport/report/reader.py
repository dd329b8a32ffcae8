"""The report's typed reader (pure): one JSON object of a report, read at a known place.

Each accessor of a :class:`Reader` checks the type of the field it returns, or raises a
:class:`~pytest_jaxport.report.errors.ReportError` naming the file and the place it reads
(``tests[3].checks[0].platforms.cuda.lowered.vendor: expected an integer, found "3"``). The
report's types (:mod:`~pytest_jaxport.report.document` and its parts) read themselves
through it, so a file's fields are checked once, where it is loaded; from there on a report
is typed.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from pytest_jaxport.model.jsontypes import Json
from pytest_jaxport.report.errors import ReportError

_T = TypeVar("_T")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_MISSING = object()


def _shown(value: object) -> str:
    """A found value as the message quotes it (JSON, cut at 40 characters)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Reader:
    """One JSON object of a report, read at a known place: each accessor checks the type of
    the field it returns, or raises a :class:`ReportError` naming the file and the place
    (``tests[3].outcome: expected a string, found 3``).

    A ``trusted`` reader reads what this package recorded itself (:func:`record_reader`: a
    worker's checks, the audit's computations): the same typed values, without checking each
    field's type again."""

    __slots__ = ("data", "file", "place", "trusted")

    def __init__(self, data: object, *, file: str, place: str = "", trusted: bool = False) -> None:
        self.file = file
        self.place = place
        self.trusted = trusted
        if not isinstance(data, Mapping):
            raise self.error(place, "a table", data)
        self.data: Mapping[str, object] = data

    def at(self, key: str) -> str:
        """The place of ``key`` in this object."""
        part = key if _NAME.match(key) else json.dumps(key)
        if not self.place:
            return part
        return f"{self.place}.{part}" if _NAME.match(key) else f"{self.place}[{part}]"

    def _inner(self, key: str) -> str:
        """The place of an object inside this one (a trusted reader's: where it is, for
        speed; it is said only where this package built a report wrongly)."""
        return f"{self.place}.{key}" if self.trusted else self.at(key)

    def error(self, place: str, expected: str, found: object) -> ReportError:
        where = f"{place}: " if place else ""
        return ReportError(f"{self.file}: {where}expected {expected}, found {_shown(found)}")

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str, expected: str) -> object:
        if key not in self.data:
            raise ReportError(f"{self.file}: {self.at(key)}: missing (expected {expected})")
        return self.data[key]

    def _typed(
        self, key: str, expected: str, ok: Callable[[object], bool], default: object
    ) -> object:
        if default is not _MISSING and key not in self.data:
            return default
        value = self._get(key, expected)
        if not self.trusted and not ok(value):
            raise self.error(self.at(key), expected, value)
        return value

    def text(self, key: str, default: object = _MISSING) -> str:
        return cast(str, self._typed(key, "a string", _is_text, default))

    def opt_text(self, key: str) -> str | None:
        """A string or ``null`` (absent reads as ``null``)."""
        return cast("str | None", self._typed(key, "a string or null", _opt(_is_text), None))

    def integer(self, key: str, default: object = _MISSING) -> int:
        return cast(int, self._typed(key, "an integer", is_integer, default))

    def opt_integer(self, key: str) -> int | None:
        return cast("int | None", self._typed(key, "an integer or null", _opt(is_integer), None))

    def number(self, key: str, default: object = _MISSING) -> float:
        return cast(float, self._typed(key, "a number", _is_number, default))

    def opt_number(self, key: str) -> float | None:
        return cast("float | None", self._typed(key, "a number or null", _opt(_is_number), None))

    def flag(self, key: str, default: object = _MISSING) -> bool:
        return cast(bool, self._typed(key, "true or false", _is_bool, default))

    def texts(self, key: str, default: object = _MISSING) -> tuple[str, ...]:
        found = self._typed(key, "a list of strings", _is_list, default)
        if found is default and default is not _MISSING:
            return cast("tuple[str, ...]", default)
        values = cast("list[object]", found)
        for i, value in enumerate(() if self.trusted else values):
            if not _is_text(value):
                raise self.error(f"{self.at(key)}[{i}]", "a string", value)
        return tuple(cast("list[str]", values))

    def json(self, key: str, default: object = _MISSING) -> Json:
        """Any JSON value (what the report keeps as written: a configuration table)."""
        return cast(Json, self._typed(key, "a value", lambda _: True, default))

    def present(self, key: str) -> bool:
        """Whether ``key`` is there and not ``null``."""
        return self.data.get(key) is not None

    def table(self, key: str) -> Reader:
        value = self._get(key, "a table")
        return Reader(value, file=self.file, place=self._inner(key), trusted=self.trusted)

    def opt_table(self, key: str) -> Reader | None:
        value = self.data.get(key)
        return None if value is None else self.table(key)

    def items(self, key: str, default: object = _MISSING) -> list[Reader]:
        """A list of tables (absent: ``[]`` where ``default`` is given)."""
        if default is not _MISSING and self.data.get(key) is None:
            return []
        values = self._get(key, "a list")
        if not isinstance(values, list):
            raise self.error(self.at(key), "a list", values)
        return [
            Reader(v, file=self.file, place=f"{self._inner(key)}[{i}]", trusted=self.trusted)
            for i, v in enumerate(values)
        ]

    def tables(self, key: str, default: object = _MISSING) -> dict[str, Reader]:
        """A table of tables, by name (absent: ``{}`` where ``default`` is given)."""
        if default is not _MISSING and self.data.get(key) is None:
            return {}
        inner = self.table(key)
        return {name: inner.table(name) for name in inner.data}

    def counts(self, key: str, default: object = _MISSING) -> dict[str, int]:
        """A table of integers (absent: ``{}`` where ``default`` is given)."""
        if default is not _MISSING and self.data.get(key) is None:
            return {}
        inner = self.table(key)
        return {name: inner.integer(name) for name in inner.data}

    def numbers(self, key: str, default: object = _MISSING) -> dict[str, float]:
        if default is not _MISSING and self.data.get(key) is None:
            return {}
        inner = self.table(key)
        return {name: inner.number(name) for name in inner.data}

    def strings(self, key: str) -> dict[str, str]:
        inner = self.table(key)
        return {name: inner.text(name) for name in inner.data}

    def convert(self, make: Callable[[Mapping[str, object]], _T]) -> _T:
        """This object through a domain type's ``from_dict`` (after its fields were read):
        what that still refuses is said at this place."""
        try:
            return make(self.data)
        except (KeyError, TypeError, ValueError, AttributeError, AssertionError) as e:
            what = f"{type(e).__name__}: {e}"
            raise ReportError(
                f"{self.file}: {self.place or 'report'}: malformed ({what})"
            ) from None


def _is_text(value: object) -> bool:
    return isinstance(value, str)


def is_integer(value: object) -> bool:
    """Whether ``value`` is a JSON integer (never a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _is_list(value: object) -> bool:
    return isinstance(value, list)


def _opt(ok: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or ok(value)


RECORD = "<built>"
"""The ``file`` this package's own records are read as (:func:`record_reader`)."""


def record_reader(data: object, place: str = "") -> Reader:
    """A reader of what this package recorded itself (a worker's checks and violations, the
    audit's computations), ``trusted``: the same typed values, without checking each field
    again; a place is said only where this package recorded one wrongly."""
    return Reader(data, file=RECORD, place=place, trusted=True)
