"""Which lines count in the suite audit's three numbers, and which are the tests' own (pure).

A maintainer reads a suite audit for the library's lock-in. A suite's tests run code of their
own too (float64 variants of each test, references computed with ``jnp.linalg``, inputs
built op by op), whose findings sit at the tests' lines: on blackjax's suite, 325 float64
findings and 123 of the 133.5 days priced for tpu. :class:`CountedLines` says which lines
count: those under ``[tool.jaxport.audit] counted_paths`` where it is set, else every line
but the tests' own (pytest's ``testpaths``, the files it collected tests from, every
``conftest.py``). The rest is reported apart, with numbers of its own.

Example::

    >>> lines = CountedLines(tests=("tests", "test_models.py"))
    >>> [lines.counts(at) for at in ("mylib/solve.py:12", "tests/test_solve.py:3",
    ...                               "test_models.py:8", "mylib/conftest.py:4", None)]
    [True, False, False, False, True]
    >>> CountedLines(paths=("mylib",)).counts("examples/demo.py:3")
    False

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pytest_jaxport.model.globs import glob_regex

CONFTEST = "conftest.py"
"""A file of this name, at any depth, is the tests' own (pytest's per-folder fixtures)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CountedLines:
    """Which lines the audit's three numbers count (see the module docstring)."""

    paths: tuple[str, ...] = ()
    """``[tool.jaxport.audit] counted_paths``: globs relative to the rootdir (a folder covers
    what is under it; a name without ``/`` matches at any depth) whose lines count; ``()``:
    every line but the tests' own."""
    tests: tuple[str, ...] = ()
    """The tests' own files and folders, relative to the rootdir: pytest's ``testpaths`` and
    the files it collected tests from. With every ``conftest.py``, what does not count where
    :attr:`paths` is empty."""

    def counts(self, location: str | None) -> bool:
        """Whether a finding at ``location`` (``file:line`` as reports show it) counts; one
        without a line counts (nothing says it is the tests')."""
        if location is None:
            return True
        file = location.rpartition(":")[0] or location
        if self.paths:
            return _matcher(self.paths)(file)
        return not _matcher((*map(_literal, self.tests), CONFTEST))(file)

    def with_tests(self, files: Iterable[str]) -> CountedLines:
        """With ``files`` among the tests' own (those not already under one of them).

        >>> CountedLines(tests=("tests",)).with_tests(["tests/test_a.py", "test_b.py"]).tests
        ('test_b.py', 'tests')
        """
        tests = CountedLines(tests=self.tests)
        new = [file for file in files if tests.counts(file)]
        return CountedLines(paths=self.paths, tests=tuple(sorted({*self.tests, *new})))

    def __add__(self, other: CountedLines) -> CountedLines:
        """Both sides' tests (legs of one suite merged); the first side's ``paths``."""
        return CountedLines(
            paths=self.paths or other.paths,
            tests=tuple(sorted({*self.tests, *other.tests})),
        )

    def describe(self) -> str:
        """What counts, in a clause: ``the lines under mylib, src/**/ops.py`` or ``every line
        but the tests' own (tests, 12 test files, every conftest.py)``.

        >>> CountedLines(tests=("tests",)).describe()
        "every line but the tests' own (tests, every conftest.py)"
        """
        if self.paths:
            return f"the lines under {', '.join(self.paths)} ([tool.jaxport.audit] counted_paths)"
        folders = [t for t in self.tests if not t.endswith(".py")]
        files = [t for t in self.tests if t.endswith(".py")]
        named = [*folders, *(files if len(files) <= 2 else [f"{len(files)} test files"])]
        return f"every line but the tests' own ({', '.join([*named, f'every {CONFTEST}'])})"

    def to_dict(self) -> dict[str, list[str]]:
        return {"paths": list(self.paths), "tests": list(self.tests)}


def collected_files(nodeids: Iterable[str]) -> tuple[str, ...]:
    """The files tests were collected from, by their node ids (relative to the rootdir).

    >>> collected_files(["tests/test_a.py::test_x[1]", "tests/test_a.py::test_y", "t.py::C::t"])
    ('t.py', 'tests/test_a.py')
    """
    return tuple(sorted({nodeid.partition("::")[0] for nodeid in nodeids if nodeid}))


def _literal(path: str) -> str:
    """A path as a glob that matches it alone, anchored at the rootdir."""
    return "/" + re.sub(r"([*?\[\\])", r"\\\1", path.strip("/"))


@functools.lru_cache(maxsize=64)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a path relative to the rootdir is one of ``patterns`` or under one (as
    ``.gitignore`` reads them: a pattern without ``/`` matches a name at any depth, one with
    a ``/`` from the rootdir)."""
    bodies = []
    for pattern in patterns:
        text = pattern.strip()
        while text.startswith("./"):
            text = text[2:]
        text = text.rstrip("/")
        anchored = "/" in text
        body = glob_regex(text.lstrip("/"))
        bodies.append(body if anchored else f"(?:.*/)?{body}")
    regex = re.compile(f"(?:{'|'.join(bodies)})(?:/.*)?\\Z", re.DOTALL) if bodies else None
    return lambda path: regex is not None and regex.match(path) is not None
