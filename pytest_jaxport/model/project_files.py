"""The files a project scan considers: ``git ls-files``, or a walk honouring ``.gitignore``.

Inside a git work tree the list is git's (tracked, and untracked but not ignored); elsewhere
a walk applies ``.git/info/exclude`` and every ``.gitignore`` from the repository's top
down, with its own matcher. Either way the ``exclude`` globs, :data:`SKIPPED_DIRS` (vendored
and installed trees, caches, build output) and virtual or conda environments are left out.
Pure standard library: it never imports JAX or pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pytest_jaxport.model.globs import glob_regex

SKIPPED_DIRS: tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".direnv",
    ".pixi",
    "site-packages",
    "dist-packages",
    "node_modules",
    "__pycache__",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    "build",
    "dist",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".ipynb_checkpoints",
    "vendor",
    "vendored",
    "_vendor",
    "third_party",
    "third-party",
    "thirdparty",
)
"""Directory names (globs) never scanned: vendored and installed trees, caches, build output.

Directories holding a ``pyvenv.cfg`` (a virtual environment) or ``conda-meta`` (a conda
environment) are skipped too, whatever their name.
"""

Source = Literal["git", "walk"]
"""How the file list was made: ``git ls-files``, or a walk with the built-in ignore matcher."""

_GIT_TIMEOUT_S = 60.0
_GIT_REDIRECTS = frozenset(
    {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_COMMON_DIR"}
)
_ENV_DIR_MARKERS = frozenset({"pyvenv.cfg", "conda-meta"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FileListing:
    """The files a scan considers, relative to the root, sorted, with how they were listed."""

    files: tuple[str, ...]
    source: Source


# --- ignore files ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _IgnorePattern:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _parse_gitignore(text: str) -> tuple[_IgnorePattern, ...]:
    patterns: list[_IgnorePattern] = []
    for raw in text.splitlines():
        line = raw
        if not line or line.startswith("#"):
            continue
        # Trailing spaces are ignored unless escaped with a backslash.
        stripped = line.rstrip(" ")
        if stripped.endswith("\\") and len(stripped) < len(line):
            stripped += " "
        line = stripped
        negate = line.startswith("!")
        if negate or line.startswith(("\\!", "\\#")):  # "\!" and "\#" escape a literal
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.removeprefix("/")
        body = glob_regex(line)
        if not anchored:
            body = "(?:.*/)?" + body
        try:
            regex = re.compile(body + r"\Z", re.DOTALL)
        except re.error:
            continue  # git ignores a pattern it cannot use; so do we
        patterns.append(_IgnorePattern(regex=regex, negate=negate, dir_only=dir_only))
    return tuple(patterns)


@dataclass(frozen=True, slots=True)
class _IgnoreFile:
    """The patterns of one ignore file, and its folder relative to the repository's top."""

    patterns: tuple[_IgnorePattern, ...]
    base: str

    def decide(self, top_rel: str, is_dir: bool) -> bool | None:
        if self.base:
            if not top_rel.startswith(self.base + "/"):
                return None
            top_rel = top_rel[len(self.base) + 1 :]
        verdict: bool | None = None
        for pattern in self.patterns:
            if pattern.dir_only and not is_dir:
                continue
            if pattern.regex.match(top_rel):
                verdict = not pattern.negate
        return verdict


def _ignored(chain: Sequence[_IgnoreFile], top_rel: str, is_dir: bool) -> bool:
    verdict = False
    for ignore_file in chain:  # outermost first: the deepest file that decides wins
        decided = ignore_file.decide(top_rel, is_dir)
        if decided is not None:
            verdict = decided
    return verdict


def _read_ignore_file(path: Path) -> tuple[_IgnorePattern, ...]:
    try:
        return _parse_gitignore(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return ()


class _PathFilter:
    """Skipped directory names, environment folders and the user's ``exclude`` globs."""

    __slots__ = ("_dir_memo", "_env_dirs", "_exclude", "_skip_globs", "_skip_names")

    def __init__(self, exclude: Sequence[str], env_dirs: Iterable[str] = ()) -> None:
        plain = [s for s in SKIPPED_DIRS if not any(ch in s for ch in "*?[")]
        self._skip_names = frozenset(plain)
        self._skip_globs = tuple(
            re.compile(glob_regex(s) + r"\Z") for s in SKIPPED_DIRS if s not in plain
        )
        self._exclude = tuple(_compile_exclude(pattern) for pattern in exclude)
        self._env_dirs = frozenset(env_dirs)
        self._dir_memo: dict[str, bool] = {"": True}

    def skipped_name(self, name: str) -> bool:
        return name in self._skip_names or any(g.match(name) for g in self._skip_globs)

    def excluded(self, rel: str) -> bool:
        return any(regex.match(rel) for regex in self._exclude)

    def dir_ok(self, rel_dir: str) -> bool:
        """Whether a directory (and every directory above it) may be scanned."""
        memo = self._dir_memo.get(rel_dir)
        if memo is not None:
            return memo
        parent, _, name = rel_dir.rpartition("/")
        ok = (
            self.dir_ok(parent)
            and not self.skipped_name(name)
            and rel_dir not in self._env_dirs
            and not self.excluded(rel_dir)
        )
        self._dir_memo[rel_dir] = ok
        return ok

    def file_ok(self, rel: str) -> bool:
        return self.dir_ok(rel.rpartition("/")[0]) and not self.excluded(rel)


def _compile_exclude(pattern: str) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValueError(f"exclude pattern {pattern!r} must be a non-empty string")
    text = pattern.strip()
    while text.startswith("./"):
        text = text[2:]
    text = text.rstrip("/")
    anchored = "/" in text
    text = text.lstrip("/")
    if not text:
        raise ValueError(f"exclude pattern {pattern!r} names no path")
    body = glob_regex(text)
    if not anchored:  # like .gitignore: a bare name matches at any depth
        body = "(?:.*/)?" + body
    try:
        return re.compile(body + r"\Z", re.DOTALL)
    except re.error as exc:
        raise ValueError(f"exclude pattern {pattern!r} is not a valid glob: {exc}") from None


# --- listing files ---------------------------------------------------------------------------


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECTS}
    try:
        return subprocess.run(
            ["git", *args],
            cwd=root,
            env=env,
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _git_files(root: Path) -> tuple[list[str] | None, bool]:
    """Files git would show (tracked, and untracked but not ignored), relative to ``root``.

    ``None`` when git is absent or fails; the second item says whether the enclosing
    repository ignores ``root`` itself (then ``root`` is scanned as a project of its own).
    """
    probe = _git(root, "rev-parse", "--is-inside-work-tree", "--show-prefix")
    if probe is None or probe.returncode != 0:
        return None, False
    lines = probe.stdout.decode("utf-8", "replace").splitlines()
    if not lines or lines[0].strip() != "true":
        return None, False
    if len(lines) > 1 and lines[1].strip():
        ignored = _git(root, "check-ignore", "-q", ".")
        if ignored is not None and ignored.returncode == 0:
            return None, True
    listing = _git(root, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    if listing is None or listing.returncode != 0:
        return None, False
    names = (os.fsdecode(raw) for raw in listing.stdout.split(b"\0") if raw)
    return list(dict.fromkeys(names)), False


def _environment_dirs(files: Iterable[str]) -> set[str]:
    """Folders below the root that hold a virtual or conda environment, from a file list."""
    found: set[str] = set()
    for rel in files:
        parts = rel.split("/")
        if parts[-1] in _ENV_DIR_MARKERS and len(parts) > 1:
            found.add("/".join(parts[:-1]))
        elif "conda-meta" in parts[1:-1]:
            found.add("/".join(parts[: parts.index("conda-meta", 1)]))
    return found


def _repository_top(root: Path) -> Path | None:
    for folder in (root, *root.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _enclosing_ignores(root: Path, top: Path) -> list[_IgnoreFile] | None:
    """``info/exclude`` and the ``.gitignore`` files from ``top`` down to ``root``'s parent.

    ``None`` when they ignore ``root`` itself: then it is scanned as a project of its own.
    """
    chain: list[_IgnoreFile] = []
    info_exclude = top / ".git" / "info" / "exclude"
    if info_exclude.is_file():
        chain.append(_IgnoreFile(patterns=_read_ignore_file(info_exclude), base=""))
    folder = ""
    for part in root.relative_to(top).parts:
        gitignore = (top / folder / ".gitignore") if folder else (top / ".gitignore")
        if gitignore.is_file():
            chain.append(_IgnoreFile(patterns=_read_ignore_file(gitignore), base=folder))
        folder = f"{folder}/{part}" if folder else part
        if _ignored(chain, folder, True):
            return None
    return chain


def _walk_files(
    root: Path,
    path_filter: _PathFilter,
    chain: tuple[_IgnoreFile, ...],
    prefix: str,
    in_repository: bool,
) -> list[str]:
    """Walk ``root``; ``prefix`` turns a root-relative path into a top-relative one."""
    files: list[str] = []
    stack: list[tuple[str, tuple[_IgnoreFile, ...]]] = [("", chain)]
    while stack:
        rel_dir, chain = stack.pop()
        folder = root / rel_dir if rel_dir else root
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        names = {entry.name for entry in entries}
        if rel_dir and (
            not names.isdisjoint(_ENV_DIR_MARKERS) or (in_repository and ".git" in names)
        ):
            continue  # an environment, or a nested repository git would not descend into
        if ".gitignore" in names:
            patterns = _read_ignore_file(folder / ".gitignore")
            if patterns:
                base = (prefix + rel_dir) if rel_dir else prefix.rstrip("/")
                chain = (*chain, _IgnoreFile(patterns=patterns, base=base))
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_symlink():
                    continue  # never leave the tree, never loop
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if (
                    path_filter.skipped_name(entry.name)
                    or path_filter.excluded(rel)
                    or _ignored(chain, prefix + rel, True)
                ):
                    continue
                stack.append((rel, chain))
            elif not path_filter.excluded(rel) and not _ignored(chain, prefix + rel, False):
                files.append(rel)
    return files


def list_project_files(
    root: Path, *, exclude: Sequence[str] = (), use_git: bool = True
) -> FileListing:
    """The files a scan of ``root`` considers, relative to it, with ``/`` separators.

    Inside a git work tree (and with ``use_git``), the list is
    ``git ls-files --cached --others --exclude-standard``; otherwise a walk that honours
    ``.git/info/exclude`` and every ``.gitignore`` from the repository's top (when there is
    one) down. Either way the ``exclude`` globs, :data:`SKIPPED_DIRS` and environment folders
    are left out. Exclude globs are relative to ``root``; one without a ``/`` matches a name
    at any depth (``"third_party"``, ``"*.gen.py"``), one with a ``/`` matches from the root
    (``"vendor/**"``, ``"src/legacy"``); excluding a directory excludes everything below it.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"scan root {str(root)!r} is not a directory")
    root = root.resolve()
    patterns = [exclude] if isinstance(exclude, str) else list(exclude)
    top = _repository_top(root)
    if use_git and top is not None:
        git_files, root_ignored = _git_files(root)
        if git_files is not None:
            path_filter = _PathFilter(patterns, _environment_dirs(git_files))
            kept = sorted(rel for rel in git_files if path_filter.file_ok(rel))
            return FileListing(files=tuple(kept), source="git")
        if root_ignored:
            top = None
    chain: list[_IgnoreFile] | None = None
    if top is not None:
        chain = _enclosing_ignores(root, top)
        if chain is None:
            top = None
    prefix = "" if top is None or top == root else root.relative_to(top).as_posix() + "/"
    files = _walk_files(root, _PathFilter(patterns), tuple(chain or ()), prefix, top is not None)
    return FileListing(files=tuple(sorted(files)), source="walk")
