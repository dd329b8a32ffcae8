"""The fifth layer: NVIDIA-bound tooling and CI assumptions, found by scanning the project.

Kernels are not the only lock-in. GPU-only ``XLA_FLAGS``, CUDA dependency pins, CUDA
container images, Nsight and ``nvidia-smi`` in scripts, hard-coded ``"gpu"``/``"cuda"``
device strings, ``CUDA_VISIBLE_DEVICES`` and GPU-only ``jax.config`` options all have to
change on another backend. :func:`scan` walks a project and reports each one as an
:class:`Assumption` with its file, line and a one-line reason.

The rules are data (:data:`pytest_jaxport.model.tooling_rules.TOOLING_RULES`): a regular expression
applied per line, the file-name globs it applies to, and a reason. The scan honours
``.gitignore`` (through ``git ls-files`` when the root is in a git work tree, through its own
matcher otherwise: :mod:`pytest_jaxport.model.project_files`), an ``exclude`` list, and
always skips vendored and installed trees, binary files and files over 1 MiB. In Python
files, comments and docstrings are prose, not assumptions.

This module is pure standard library: it never imports JAX or pytest.

Example::

    >>> scan_text("Dockerfile", "FROM nvidia/cuda:12.3.1-runtime-ubuntu22.04\\n")[0].rule
    'cuda-image'
    >>> [a.line for a in scan_text("model.py", '# jax.devices("gpu")\\njax.devices("gpu")\\n')]
    [2]

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_jaxport.model.globs import glob_regex
from pytest_jaxport.model.project_files import Source, list_project_files
from pytest_jaxport.model.tooling_rules import TOOLING_RULES, ToolingRule

MAX_FILE_BYTES = 1 << 20
"""Files larger than this are skipped: generated or data files, not hand-written config."""

TEXT_WIDTH = 120
"""An :class:`Assumption`'s ``text`` is the stripped line, cut to this many characters."""

_BINARY_PROBE = 8192
_PYTHON_SUFFIXES = (".py", ".pyi", ".pyw")
_BEYOND_ANY_OFFSET = 1 << 62


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Assumption:
    """One NVIDIA-bound assumption found in the project.

    ``file`` is relative to the scanned root with ``/`` separators, ``line`` is 1-based,
    ``rule`` is the :class:`ToolingRule` id and ``text`` the stripped source line (cut to
    :data:`TEXT_WIDTH` characters). Assumptions sort by file, line, then rule.
    """

    file: str
    line: int
    rule: str
    reason: str
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule}: {self.reason}"

    def to_dict(self) -> dict[str, str | int]:
        """A JSON-ready dict; :meth:`from_dict` reads it back."""
        return {
            "file": self.file,
            "line": self.line,
            "rule": self.rule,
            "reason": self.reason,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Assumption:
        """Read back :meth:`to_dict`'s output; a wrong or missing key raises ``ValueError``."""
        if not isinstance(data, Mapping):
            raise ValueError(f"an assumption must be a mapping, got {type(data).__name__}")
        values: dict[str, str] = {}
        for key in ("file", "rule", "reason", "text"):
            value = data.get(key)
            if not isinstance(value, str):
                raise ValueError(
                    f"assumption key {key!r} must be a string, got {type(value).__name__}"
                )
            values[key] = value
        line = data.get("line")
        if isinstance(line, bool) or not isinstance(line, int) or line < 1:
            raise ValueError(f"assumption key 'line' must be an integer >= 1, got {line!r}")
        return cls(line=line, **values)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolingScan:
    """A scan's findings and what it looked at.

    ``files_listed`` counts the files left after ignore rules, ``exclude`` and skipped
    directories; ``files_read`` those some rule applied to by name (and were not binary or
    too large), which were read and searched.
    """

    assumptions: tuple[Assumption, ...]
    files_listed: int
    files_read: int
    source: Source


def assumptions_per_rule(assumptions: Iterable[Assumption]) -> dict[str, int]:
    """Assumptions per rule id, sorted by id (ids with none are absent)."""
    return dict(sorted(Counter(a.rule for a in assumptions).items()))


# --- searching -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _RuleGroup:
    """Rules sharing one ``files`` tuple, with the globs compiled once."""

    names: re.Pattern[str] | None
    paths: re.Pattern[str] | None
    rules: tuple[ToolingRule, ...]

    def applies(self, rel: str, name: str) -> bool:
        return bool(
            (self.names is not None and self.names.match(name))
            or (self.paths is not None and self.paths.match(rel))
        )


def _rule_groups(rules: Sequence[ToolingRule]) -> tuple[_RuleGroup, ...]:
    by_files: dict[tuple[str, ...], list[ToolingRule]] = {}
    for rule in rules:
        if not isinstance(rule, ToolingRule):
            raise TypeError(f"rules must be ToolingRule instances, got {type(rule).__name__}")
        by_files.setdefault(rule.files, []).append(rule)
    groups = []
    for files, members in by_files.items():
        name_globs = [glob_regex(g) for g in files if "/" not in g]
        path_globs = [glob_regex(g.lstrip("/")) for g in files if "/" in g]
        names = re.compile("(?:" + "|".join(name_globs) + r")\Z", re.I) if name_globs else None
        paths = (
            re.compile(r"(?:.*/)?(?:" + "|".join(path_globs) + r")\Z", re.I) if path_globs else None
        )
        groups.append(_RuleGroup(names=names, paths=paths, rules=tuple(members)))
    return tuple(groups)


def _applicable(groups: Sequence[_RuleGroup], rel: str) -> list[ToolingRule]:
    name = rel.rpartition("/")[2]
    return [rule for group in groups if group.applies(rel, name) for rule in group.rules]


def _comment_start(line: str) -> int:
    """Where a ``#`` comment starts in a shell/YAML/TOML/Dockerfile line (``len`` if none)."""
    if "#" not in line:
        return len(line)
    quote = ""
    previous = " "
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#" and previous.isspace():
            return index
        previous = char
    return len(line)


# Just enough of a Python lexer to tell code from prose: comments, string literals (with
# prefixes, triple quotes, escapes), brackets and newlines. Much faster than ``tokenize``,
# never raises, and tests hold it to ``tokenize`` on tricky sources.
_PY_LEXEME = re.compile(
    r"(?P<comment>#[^\n]*)"
    r"|(?P<string>(?:(?<!\w)[rRbBuUfFtT]{1,2})?(?:"
    r"'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*(?:'''|\Z)"
    r'|"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*(?:"""|\Z)'
    r"|'[^'\\\n]*(?:\\.[^'\\\n]*)*(?:'|(?=\n)|\Z)"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*(?:"|(?=\n)|\Z)'
    r"))"
    r"|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<newline>\n)",
    re.DOTALL,
)


def _blank(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` holds only whitespace and line continuations."""
    between = text[start:end]
    return not between.strip() or not between.replace("\\\n", "").strip()


def _python_prose(text: str) -> list[tuple[int, int]]:
    """Offsets ``(start, end)`` of the comments and docstrings of Python source, sorted.

    A docstring here is any string literal that is a statement of its own: module, class
    and function docstrings, and bare strings used as comments. Linear in the text's size.
    """
    spans: list[tuple[int, int]] = []
    depth = 0
    clean = True  # only whitespace, comments and strings since the logical line began
    pending: list[tuple[int, int]] = []  # strings that may turn out to be a docstring
    last_end = 0
    comment_end = -1
    for lexeme in _PY_LEXEME.finditer(text):
        kind = lexeme.lastgroup
        start, end = lexeme.span()
        if kind == "newline" and start and text[start - 1] == "\\" and comment_end != start:
            continue  # a backslash continuation: the logical line goes on
        if not _blank(text, last_end, start):
            clean = False
            pending = []
        last_end = end
        if kind == "comment":
            spans.append((start, end))
            comment_end = end
        elif kind == "string":
            if depth == 0 and clean:
                pending.append((start, end))
            else:
                clean = False
        elif kind == "newline":
            if depth == 0:
                spans.extend(pending)
                pending = []
                clean = True
        else:
            clean = False
            pending = []
            depth = depth + 1 if kind == "open" else max(depth - 1, 0)
    if _blank(text, last_end, len(text)):
        spans.extend(pending)
    spans.sort()
    return spans


def _in_prose(spans: Sequence[tuple[int, int]], offset: int) -> bool:
    index = bisect.bisect_right(spans, (offset, _BEYOND_ANY_OFFSET)) - 1
    return index >= 0 and spans[index][0] <= offset < spans[index][1]


def _clip(line: str) -> str:
    text = line.strip()
    return text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 1] + "…"


def _newlines(text: str) -> list[int]:
    return [match.start() for match in re.finditer("\n", text)]


def _lines_with(lowered: str, newlines: Sequence[int], needles: Iterable[str]) -> set[int]:
    """0-based indices of the lines of ``lowered`` that contain one of ``needles``."""
    found: set[int] = set()
    for needle in needles:
        position = lowered.find(needle)
        while position != -1:
            index = bisect.bisect_right(newlines, position)
            found.add(index)
            if index >= len(newlines):
                break
            position = lowered.find(needle, newlines[index] + 1)
    return found


def _lines_matching(text: str, newlines: Sequence[int], regex: re.Pattern[str]) -> set[int]:
    """0-based indices of the lines that a match of ``regex`` in the whole text touches."""
    found: set[int] = set()
    for match in regex.finditer(text):
        first = bisect.bisect_left(newlines, match.start())
        last = bisect.bisect_left(newlines, max(match.start(), match.end() - 1))
        found.update(range(first, last + 1))
    return found


class _SourceText:
    """One file's text, with what the search needs computed once and only when needed."""

    __slots__ = ("_newlines", "_prose", "_starts", "is_python", "lines", "lowered", "text")

    def __init__(self, rel: str, text: str) -> None:
        self.text = text.replace("\r\n", "\n") if "\r" in text else text
        self.lowered = self.text.lower()
        self.is_python = rel.lower().endswith(_PYTHON_SUFFIXES)
        self.lines: list[str] = []
        self._newlines: list[int] | None = None
        self._prose: list[tuple[int, int]] | None = None
        self._starts: list[int] = []

    def newlines(self) -> list[int]:
        if self._newlines is None:
            self._newlines = _newlines(self.text)
        return self._newlines

    def line(self, index: int) -> str:
        if not self.lines:
            self.lines = self.text.split("\n")
        return self.lines[index]

    def is_code(self, index: int, column: int) -> bool:
        """Whether a match at ``column`` of line ``index`` is code, not comment or docstring."""
        if self._prose is None:
            self._prose = _python_prose(self.text)
            self._starts = [0, *(n + 1 for n in self.newlines())]
        return not _in_prose(self._prose, self._starts[index] + column)

    def matches(self, index: int, regex: re.Pattern[str]) -> bool:
        """Whether ``regex`` matches code (not a comment or docstring) in line ``index``."""
        line = self.line(index)
        if not self.is_python:
            return regex.search(line[: _comment_start(line)]) is not None
        return any(self.is_code(index, match.start()) for match in regex.finditer(line))


IGNORE = re.compile(r"#\s*jaxport:\s*ignore\[([\w\s,-]+)\]")
"""``# jaxport: ignore[cuda-pin]`` at the end of a line: that line is not the rules' (named)
assumption. The example CI workflow's deviceless CUDA leg carries it: it installs the CUDA
plugin to measure, not to run."""


def ignored_rules(line: str) -> frozenset[str]:
    """The rule ids a line's ``# jaxport: ignore[...]`` comment names.

    >>> sorted(ignored_rules('extra: jax[cuda12]  # jaxport: ignore[cuda-pin, nvidia-tool]'))
    ['cuda-pin', 'nvidia-tool']
    """
    found = IGNORE.search(line)
    if found is None:
        return frozenset()
    return frozenset(part.strip() for part in found.group(1).split(",") if part.strip())


def _search(rel: str, text: str, rules: Sequence[ToolingRule]) -> list[Assumption]:
    """Assumptions in one file's text, for the rules that apply to it by name (a line's
    ``# jaxport: ignore[rule]`` leaves that rule out there)."""
    source = _SourceText(rel, text)
    present: dict[str, bool] = {}
    found: dict[tuple[int, str], Assumption] = {}
    low_newlines: list[int] | None = None
    for rule in rules:
        if rule.needles:
            needles = []
            for needle in rule.needles:
                if needle not in present:
                    present[needle] = needle in source.lowered
                if present[needle]:
                    needles.append(needle)
            if not needles:
                continue
            if low_newlines is None:  # lower() may change lengths, never the line count
                low_newlines = _newlines(source.lowered)
            candidates = _lines_with(source.lowered, low_newlines, needles)
        else:
            candidates = _lines_matching(source.text, source.newlines(), rule.regex)
        for index in sorted(candidates):
            key = (index + 1, rule.id)
            if key in found or rule.id in ignored_rules(source.line(index)):
                continue
            if source.matches(index, rule.regex):
                found[key] = Assumption(
                    file=rel,
                    line=index + 1,
                    rule=rule.id,
                    reason=rule.reason,
                    text=_clip(source.line(index)),
                )
    return list(found.values())


def scan_text(
    file: str, text: str, *, rules: Sequence[ToolingRule] = TOOLING_RULES
) -> tuple[Assumption, ...]:
    """Assumptions in one file's ``text``, as if it lived at ``file`` (a relative path).

    The rules that apply are chosen by ``file``'s name, exactly as :func:`scan` does.
    """
    rel = file.replace(os.sep, "/")
    return tuple(sorted(_search(rel, text, _applicable(_rule_groups(rules), rel))))


def scan_tree(
    root: Path,
    *,
    exclude: Sequence[str] = (),
    rules: Sequence[ToolingRule] = TOOLING_RULES,
    use_git: bool = True,
    max_bytes: int = MAX_FILE_BYTES,
) -> ToolingScan:
    """Like :func:`scan`, also saying how many files were listed and read, and how."""
    root = Path(root)
    groups = _rule_groups(rules)
    listing = list_project_files(root, exclude=exclude, use_git=use_git)
    base = root.resolve()
    found: list[Assumption] = []
    read = 0
    for rel in listing.files:
        applicable = _applicable(groups, rel)
        if not applicable:
            continue
        path = base / rel
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                continue
            with open(path, "rb") as handle:
                data = handle.read(max_bytes + 1)
        except OSError:
            continue  # vanished or unreadable: nothing to report
        if len(data) > max_bytes or b"\0" in data[:_BINARY_PROBE]:
            continue
        read += 1
        text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
        found.extend(_search(rel, text, applicable))
    return ToolingScan(
        assumptions=tuple(sorted(found)),
        files_listed=len(listing.files),
        files_read=read,
        source=listing.source,
    )


def scan(
    root: Path,
    *,
    exclude: Sequence[str] = (),
    rules: Sequence[ToolingRule] = TOOLING_RULES,
    use_git: bool = True,
) -> tuple[Assumption, ...]:
    """Every NVIDIA-bound assumption under ``root``, sorted by file, line and rule.

    Skips what ``.gitignore`` ignores, the ``exclude`` globs (see :func:`list_project_files`),
    :data:`SKIPPED_DIRS`, virtual environments, symlinks, binary files and files over
    :data:`MAX_FILE_BYTES`. Each line is reported at most once per rule id. ``use_git=False``
    uses the built-in ``.gitignore`` matcher even inside a git work tree.
    """
    return scan_tree(root, exclude=exclude, rules=rules, use_git=use_git).assumptions
