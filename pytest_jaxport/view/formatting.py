"""How a number, a count, a share, a time and a heading read in every format (pure).

The view model (:mod:`pytest_jaxport.view.viewmodel`) and every renderer say a figure through
these, so a count reads ``2,000`` and a share ``4.5%`` the same in the terminal, Markdown,
HTML and the findings.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
import re

from pytest_jaxport.model.memory import capacity_size, memory_size


def number(n: int | float) -> str:
    """``2,000``; floats as ``2.5``."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.4g}"
    return f"{int(n):,}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 check``, ``2,000 checks``, ``3 differing leaves`` (``many`` for irregular plurals)."""
    return f"{number(n)} {word if n == 1 else many or word + 's'}"


def pct(fraction: float) -> str:
    """``0%``, ``<0.1%``, ``4.5%``, ``31%``."""
    value = fraction * 100
    if value == 0:
        return "0%"
    if value < 0.1:
        return "<0.1%"
    if value < 10:
        return f"{value:.1f}".removesuffix(".0") + "%"
    return f"{value:.0f}%"


def days_text(days: float) -> str:
    """``11``, ``2.5``, ``0.25``."""
    return f"{days:.2f}".rstrip("0").rstrip(".")


def seconds_text(seconds: float) -> str:
    """A time in the unit that reads best: ``5.76 ns``, ``41 µs``, ``12.5 ms``, ``3.2 s``."""
    if seconds <= 0 or not math.isfinite(seconds):
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            return f"{seconds / scale:.3g} {unit}"
    raise AssertionError("unreachable")


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts ``test[4]`` before ``test[10]``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


def sentence(text: str) -> str:
    """``text`` with its first letter upper case, the rest as written (a heading)."""
    return text[:1].upper() + text[1:]


def first_line(text: str, limit: int = 200) -> str:
    """The first non-empty line of ``text``, cut at ``limit`` characters."""
    line = next((x.strip() for x in str(text).splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def memory_of(needed: float, capacity: float) -> str:
    """``13.1 of 15.75 GiB``: a plan against its device's capacity, the unit said once where
    both are in it (``768 MiB of 15.75 GiB`` where they are not).

    >>> memory_of(14_063_000_000, 16_909_336_064), memory_of(805_306_368, 16_909_336_064)
    ('13.1 of 15.75 GiB', '768 MiB of 15.75 GiB')
    """
    planned, whole = memory_size(needed), capacity_size(capacity)
    unit, whole_unit = planned.rsplit(" ", 1)[1], whole.rsplit(" ", 1)[1]
    if unit == whole_unit:
        return f"{planned.rsplit(' ', 1)[0]} of {whole}"
    return f"{planned} of {whole}"


def used_pct(fraction: float) -> str:
    """The share of a device's memory a plan takes, never rounded up to the capacity:
    ``83%``, ``>99%`` (fits, but rounds to 100), ``100%``, ``119%``.

    >>> used_pct(0.8316), used_pct(0.996), used_pct(1.0), used_pct(1.19)
    ('83%', '>99%', '100%', '119%')
    """
    said = pct(fraction)
    if fraction < 1 and said == "100%":
        return ">99%"
    return said
