"""Gitignore-style globs as regular expressions (pure standard library).

One translation for every glob the project scan reads: its rules' file globs
(:mod:`pytest_jaxport.model.tooling_rules`), ``.gitignore`` patterns and ``exclude`` globs
(:mod:`pytest_jaxport.model.project_files`).

>>> import re
>>> bool(re.fullmatch(glob_regex("**/*.yml"), ".github/workflows/ci.yml"))
True

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re


def glob_regex(pattern: str) -> str:
    """Translate a gitignore-style glob to a regex body.

    ``*`` and ``?`` stop at ``/``; ``**/`` is any number of directories, a trailing ``/**``
    everything below, ``[...]`` a character class, and ``\\`` escapes the next character.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            double = j - i >= 2 and (i == 0 or pattern[i - 1] == "/")
            if double and j < n and pattern[j] == "/":
                out.append("(?:.*/)?")
                j += 1
            elif double and j == n:
                out.append(".*")
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            if j >= n:
                out.append(re.escape(c))
            else:
                out.append(_class_regex(pattern[i + 1 : j]))
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _class_regex(body: str) -> str:
    """A glob's ``[...]`` body as a regex class that never matches ``/``."""
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    parts: list[str] = []
    k = 0
    while k < len(body):
        char = body[k]
        if char == "\\" and k + 1 < len(body):
            parts.append(re.escape(body[k + 1]))
            k += 2
            continue
        parts.append("\\" + char if char in "\\[]&~|" else char)  # never re set syntax
        k += 1
    return ("[^/" if negate else "[") + "".join(parts) + "]"
