"""How much of a portability report to show: options shared by the plugin and ``jaxport show``.

Declared once (:data:`DISPLAY_OPTIONS`) and added to pytest as ``--jaxport-report-<name>``
and to ``jaxport show`` as ``--<name>`` by :func:`add_display_options`, the way
pytest-benchmark shares its display options between its plugin and its console script.
Verbosity follows pytest's: ``-v``/``-q``, or the ``verbosity_jaxport`` ini value.

Imports nothing heavy: the plugin imports it when pytest starts.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

Details = Literal["auto", "none", "problems", "all"]
DETAILS: tuple[Details, ...] = get_args(Details)
PROBLEM_LINES = 18
"""Lines the default terminal problem list takes at most: group headers, rows, "+N more"
(every group keeps its header)."""
HOTSPOT_ROWS = 5
"""Hotspot rows the default terminal report lists."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DisplayOptions:
    """How much of a report to show; the same for ``pytest --jaxport-report-*`` and ``jaxport
    show``. ``verbosity`` is pytest's (``-v``/``-q``, or ``verbosity_jaxport``)."""

    verbosity: int = 0
    details: Details = "auto"
    failed_only: bool = False
    platform: str | None = None
    top: int | None = None
    """Hotspot rows to show; ``0`` for all; ``None``: by verbosity."""

    def detail_level(self) -> Literal["none", "problems", "all"]:
        """Per-test details: ``none`` by default, ``problems`` at ``-v``, ``all`` at ``-vv``."""
        if self.details != "auto":
            return self.details
        if self.verbosity >= 2:
            return "all"
        return "problems" if self.verbosity == 1 else "none"

    def layout_in_full(self) -> bool:
        """Whether the sites tables list every layout finding as a row (``-v``, or
        ``--jaxport-report-details=all``); else each platform's are said in one line."""
        return self.verbosity >= 1 or self.details == "all"

    def problem_lines(self) -> int | None:
        """Lines the terminal's problem list may take: ``None`` (every problem) from ``-v``
        on, ``0`` (group headers only) at ``-q``."""
        if self.verbosity < 0:
            return 0
        return None if self.verbosity >= 1 else PROBLEM_LINES

    def hotspot_rows(self, default: int = HOTSPOT_ROWS) -> int | None:
        """How many hotspot rows to show; ``None`` for all."""
        if self.top is not None:
            return None if self.top == 0 else self.top
        if self.verbosity < 0:
            return 0
        if self.verbosity >= 2:
            return None
        return default * 4 if self.verbosity == 1 else default


def _non_negative(value: str) -> int:
    n = int(value)
    if n < 0:
        raise ValueError(value)
    return n


_non_negative.__name__ = "non-negative integer"  # argparse names the type in its error

DISPLAY_OPTIONS: tuple[tuple[str, dict[str, object]], ...] = (
    ("details", {
        "choices": DETAILS, "default": "auto",
        "help": "per-test details: none, problems (tests with a finding) or all; auto follows "
                "-v (problems) and -vv (all)",
    }),
    ("failed-only", {
        "action": "store_true", "default": False,
        "help": "list only failed tests in the details and the test matrix",
    }),
    ("platform", {
        "default": None, "metavar": "PLATFORM",
        "help": "show one platform only (problems, hotspots, totals, matrix)",
    }),
    ("top", {
        "type": _non_negative, "default": None, "metavar": "N",
        "help": "show the N heaviest dispatch sites (0: all; default 5, 20 with -v)",
    }),
)  # fmt: skip
"""The display options, defined once: ``--jaxport-report-<name>`` in pytest, ``--<name>`` in
``jaxport show``."""


def add_display_options(add: Callable[..., object], *, prefix: str, dest_prefix: str = "") -> None:
    """Declare the display options with ``add`` (pytest's ``group.addoption`` or argparse's
    ``add_argument``), each as ``<prefix><name>`` stored in ``<dest_prefix><name>``."""
    for name, kwargs in DISPLAY_OPTIONS:
        add(f"{prefix}{name}", dest=dest_prefix + name.replace("-", "_"), **kwargs)


def display_options(
    get: Callable[[str], object], *, dest_prefix: str = "", verbosity: int = 0
) -> DisplayOptions:
    """The options as parsed (``get(dest)`` reads one; their parser checked each against its
    declaration), with pytest's or the CLI's verbosity."""

    def value(name: str) -> object:
        return get(dest_prefix + name.replace("-", "_"))

    auto: Details = "auto"
    details = next((d for d in DETAILS if d == value("details")), auto)
    platform, top = value("platform"), value("top")
    return DisplayOptions(
        verbosity=verbosity,
        details=details,
        failed_only=bool(value("failed-only")),
        platform=str(platform) if platform else None,
        top=top if isinstance(top, int) else None,
    )
