"""The fifth layer: NVIDIA-bound tooling and CI assumptions, found by scanning the project.

Kernels are not the only lock-in. GPU-only ``XLA_FLAGS``, CUDA dependency pins, CUDA
container images, Nsight and ``nvidia-smi`` in scripts, hard-coded ``"gpu"``/``"cuda"``
device strings, ``CUDA_VISIBLE_DEVICES`` and GPU-only ``jax.config`` options all have to
change on another backend. :func:`scan` walks a project and reports each one as an
:class:`Assumption` with its file, line and a one-line reason.

The rules are data (:data:`RULES`): a regular expression applied per line, the file-name
globs it applies to, and a reason. The scan honours ``.gitignore`` (through ``git ls-files``
when the root is in a git work tree, through its own matcher otherwise), an ``exclude`` list,
and always skips vendored and installed trees, binary files and files over 1 MiB. In Python
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
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pytest_jaxport.model.platforms import DESCRIPTIONS

MAX_FILE_BYTES = 1 << 20
"""Files larger than this are skipped: generated or data files, not hand-written config."""

TEXT_WIDTH = 120
"""An :class:`Assumption`'s ``text`` is the stripped line, cut to this many characters."""

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

_BINARY_PROBE = 8192
_GIT_TIMEOUT_S = 60.0
_GIT_REDIRECTS = frozenset(
    {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_COMMON_DIR"}
)
_ENV_DIR_MARKERS = frozenset({"pyvenv.cfg", "conda-meta"})
_PYTHON_SUFFIXES = (".py", ".pyi", ".pyw")
_RULE_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
_BEYOND_ANY_OFFSET = 1 << 62


def _glob_regex(pattern: str) -> str:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolingRule:
    """One kind of NVIDIA-bound assumption, as data.

    ``pattern`` is a regular expression searched in each line (Python's :mod:`re`, compiled
    with ``re.MULTILINE``; it should not look across line ends). ``files`` are globs over
    file names (``"Dockerfile*"``), or over paths when they contain a ``/``
    (``".github/workflows/*.yml"`` matches that path at any depth); matching ignores case.
    ``needles`` are optional lower-case substrings of which every match contains at least
    one: a file whose lower-cased text contains none is not searched (a speed-up only).
    Several rules may share an ``id``; a line is reported once per ``id``.

    >>> rule = ToolingRule(id="rocm-smi", pattern=r"\\brocm-smi\\b", files=("*.sh",),
    ...                    reason="ROCm-only tool")
    >>> bool(rule.regex.search("rocm-smi --showuse"))
    True
    """

    id: str
    pattern: str
    files: tuple[str, ...]
    reason: str
    needles: tuple[str, ...] = ()
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _RULE_ID.fullmatch(self.id):
            raise ValueError(
                f"tooling rule id must be lower-case letters, digits and '-', got {self.id!r}"
            )
        if isinstance(self.files, str) or not all(isinstance(g, str) and g for g in self.files):
            raise ValueError(
                f"tooling rule {self.id!r}: files must be a sequence of non-empty globs, "
                f"got {self.files!r}"
            )
        if not self.files:
            raise ValueError(f"tooling rule {self.id!r}: files must name at least one glob")
        for glob in self.files:
            try:
                re.compile(_glob_regex(glob))
            except re.error as exc:
                raise ValueError(
                    f"tooling rule {self.id!r}: {glob!r} is not a valid glob: {exc}"
                ) from None
        if not isinstance(self.reason, str) or not self.reason.strip() or "\n" in self.reason:
            raise ValueError(f"tooling rule {self.id!r}: reason must be one non-empty line")
        if isinstance(self.needles, str) or not all(isinstance(n, str) and n for n in self.needles):
            raise ValueError(
                f"tooling rule {self.id!r}: needles must be a sequence of non-empty strings"
            )
        try:
            regex = re.compile(self.pattern, re.MULTILINE)
        except (re.error, TypeError) as exc:
            raise ValueError(
                f"tooling rule {self.id!r}: pattern {self.pattern!r} is not a valid regex: {exc}"
            ) from None
        object.__setattr__(self, "files", tuple(self.files))
        object.__setattr__(self, "needles", tuple(n.lower() for n in self.needles))
        object.__setattr__(self, "regex", regex)


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
class FileListing:
    """The files a scan considers, relative to the root, sorted, with how they were listed."""

    files: tuple[str, ...]
    source: Source


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


# File groups the default rules apply to. Matching ignores case; a glob without "/" is
# matched against the file name.
_PYTHON = ("*.py", "*.pyi", "*.pyw")
_SCRIPTS = (
    "*.sh",
    "*.bash",
    "*.zsh",
    "*.ksh",
    "*.fish",
    "*.slurm",
    "*.sbatch",
    "*.pbs",
    "*.lsf",
    "Makefile",
    "GNUmakefile",
    "*.mk",
    "*.make",
    "Justfile",
    "*.just",
    "Jenkinsfile",
    "Jenkinsfile.*",
    "tox.ini",
)
_CONTAINERS = (
    "Dockerfile",
    "Dockerfile.*",
    "*.Dockerfile",
    "Containerfile",
    "Containerfile.*",
    "*.Containerfile",
    "devcontainer.json",
    ".devcontainer.json",
)
# CI workflows (.github/workflows/*.yml, .gitlab-ci.yml, ...), compose files, Kubernetes
# manifests and conda environment files are all YAML.
_YAML = ("*.yml", "*.yaml")
_ENV = (".env", ".env.*", "*.env", ".envrc")
_CONFIG = ("*.toml", "*.ini", "*.cfg")
_DEPENDENCIES = (
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "*requirements*.txt",
    "*requirements*.in",
    "requirements/*.txt",
    "requirements/*.in",
    "constraints*.txt",
    "*.lock",
    "Pipfile",
    "pylock*.toml",
    "noxfile.py",
)
_NOT_PYTHON = _SCRIPTS + _CONTAINERS + _YAML + _ENV + _CONFIG
_EVERYWHERE = _PYTHON + _NOT_PYTHON

_GPU = r"(?i:gpu|cuda)"
_DEVICE = r"""["']""" + _GPU + r"""(?::\d+)?["']"""  # "gpu", 'cuda', "cuda:0"
_PLATFORM_LIST = r"""[\w,]*?\b""" + _GPU + r"\b"  # cuda, "cpu,cuda"
_TOOLS = (
    r"(?:nsys|ncu|nvidia-smi|nvidia-docker|cuda-gdb|cuda-memcheck|compute-sanitizer"
    r"|nvprof|nv-nsight-cu-cli|dcgmi|nvcc)"
)
_TOOL_NEEDLES = ("nsys", "ncu", "nvidia", "cuda", "nvprof", "nsight", "dcgmi", "nvcc", "sanitizer")
_TOOL_REASON = "NVIDIA-only tool (Nsight, nvidia-smi, cuda-gdb): the workflow needs a counterpart"
_NOT_A_PATH = r"(?<![\w./-])"


def _any(*alternatives: str) -> str:
    return "|".join(alternatives)


RULES: tuple[ToolingRule, ...] = (
    ToolingRule(
        id="xla-gpu-flag",
        pattern=r"(?<![\w-])--xla_gpu_\w+",
        files=_EVERYWHERE,
        needles=("--xla_gpu_",),
        reason="GPU-only XLA flag: no effect off GPU, and cuDNN/Triton/NCCL tuning is CUDA-only",
    ),
    ToolingRule(
        id="cuda-pin",
        pattern=_any(
            r"\bjax(?:lib)?\[[^\]\n]*\bcuda",  # jax[cuda12], jax[cuda12-local], jax[cpu,cuda12]
            _NOT_A_PATH + r"jax[-_]?cuda\d*[-_](?:plugin|pjrt)\b",  # jax-cuda12-plugin
            r"\d\+cu(?:da)?\d",  # torch==2.1.0+cu121, jaxlib==0.4.20+cuda12.cudnn89
            _NOT_A_PATH + r"nvidia[-_](?!smi\b|docker\b)[a-z0-9]",  # nvidia-cudnn-cu12
            _NOT_A_PATH + r"cupy[-_]cuda\w*",
            r"download\.pytorch\.org/whl/(?:nightly/)?cu\d+",
            r"\btensorflow\[[^\]\n]*and-cuda",
            _NOT_A_PATH + r"(?:tensorflow|paddlepaddle|onnxruntime|faiss|mxnet)-gpu\b",
            _NOT_A_PATH + r"[a-z][\w.]*-cu\d{2,3}\b",  # cudf-cu12, mxnet-cu112
            r"\bpypi\.(?:ngc\.)?nvidia\.com",  # NVIDIA's package index
            r"\bdeveloper\.download\.nvidia\.com",  # NVIDIA's apt/yum repositories
            r"jax_cuda_releases",  # jax's CUDA find-links page
            _NOT_A_PATH + r"(?:cudatoolkit|pytorch-cuda)\b",  # conda
            _NOT_A_PATH + r"cuda-(?:toolkit|nvcc|version|runtime|cudart|python|bindings)\b",
            r"(?<![\w/-])nvidia::",  # conda channel prefix
            r"^[ \t]*-[ \t]*nvidia[ \t]*$",  # conda channel list entry
            r"^[ \t]*-[ \t]*[\w.-]+[ \t]*=[^=\s]*=\S*cuda",  # conda build: jaxlib=*=cuda*
            r"""\bextras[ \t]*=[ \t]*\[[^\]\n]*["'](?:and-)?cuda""",  # Poetry, Pipfile extras
            r"\buses:[ \t]*\S*(?i:cuda)",  # a CI action that installs the CUDA toolkit
        ),
        files=_DEPENDENCIES + _SCRIPTS + _CONTAINERS + _YAML,
        needles=("cuda", "nvidia", "+cu", "-cu", "-gpu", "download.pytorch.org"),
        reason="CUDA-specific dependency: NVIDIA wheels or a CUDA build no other backend uses",
    ),
    ToolingRule(
        id="cuda-image",
        pattern=_any(
            _NOT_A_PATH + r"nvidia/[a-z0-9][\w.-]*",  # nvidia/cuda:12.3.1-devel-ubuntu22.04
            r"\bnvcr\.io/",  # NVIDIA GPU Cloud
            r"\bghcr\.io/nvidia/",  # ghcr.io/nvidia/jax
            r"^[ \t]*(?i:FROM)[ \t]+(?:--platform=\S+[ \t]+)?\S*:\S*(?:cuda|cudnn|-gpu)",
            r"""\b(?:image|container):[ \t]*["']?\S*:\S*(?:cuda|cudnn|-gpu)""",
        ),
        files=_CONTAINERS + _YAML + _SCRIPTS + _ENV,
        needles=("nvidia/", "nvcr.io", "cuda", "cudnn", "-gpu"),
        reason="CUDA container image: the environment needs an NVIDIA driver and GPU",
    ),
    ToolingRule(
        id="nvidia-tool",
        pattern=r"(?<![\w.-])" + _TOOLS + r"(?![\w-])",
        files=_NOT_PYTHON,
        needles=_TOOL_NEEDLES,
        reason=_TOOL_REASON,
    ),
    ToolingRule(
        id="nvidia-tool",
        pattern=r"""["'](?:\S*/)?""" + _TOOLS + r"(?![\w-])",  # subprocess.run(["nsys", ...])
        files=_PYTHON,
        needles=_TOOL_NEEDLES,
        reason=_TOOL_REASON,
    ),
    ToolingRule(
        id="cuda-device-string",
        pattern=_any(
            # jax.devices("gpu"), jax.local_devices(backend="cuda"), jax.device_count("gpu")
            r"\b(?:local_)?(?:devices|device_count)\([ \t]*(?:backend[ \t]*=[ \t]*)?" + _DEVICE,
            # jit(f, backend="gpu"), device="cuda", platform = "cuda"
            r"\b(?:backend|platform|platforms|device|device_type|accelerator)[ \t]*=[ \t]*"
            + _DEVICE,
            # jax.default_backend() == "gpu", d.platform != "cuda"
            r"(?:\bdefault_backend\(\)|\bplatform|\bbackend|\.device_kind)[ \t]*[!=]=[ \t]*"
            + _DEVICE,
            _DEVICE + r"[ \t]*[!=]=[ \t]*(?:jax\.)?(?:default_backend\(\)|\w*\.platform)",
            r"""\bdefault_device\([^)\n]*["']""" + _GPU,  # jax.default_device(...gpu...)
            r"\bdevice\([ \t]*" + _DEVICE,  # torch.device("cuda")
            r"\.to\([ \t]*" + _DEVICE,  # tensor.to("cuda")
            # os.environ["JAX_PLATFORMS"] = "cuda", os.environ.setdefault("JAX_PLATFORMS", "gpu")
            r"""\bJAX_PLATFORMS?(?:_NAME)?["'][ \t]*(?:\][ \t]*=|,)[ \t]*["']""" + _PLATFORM_LIST,
            # jax.config.update("jax_platforms", "cuda")
            r"""["']jax_(?:platforms|platform_name)["'][ \t]*,[ \t]*["']""" + _PLATFORM_LIST,
        ),
        files=_PYTHON,
        needles=("gpu", "cuda"),
        reason='hard-coded "gpu"/"cuda" device: never runs on TPU or CPU ("cuda": nor on ROCm)',
    ),
    ToolingRule(
        id="cuda-device-string",
        pattern=r"""\bJAX_PLATFORMS?(?:_NAME)?\b["']?[ \t]*[=:][ \t]*["']?""" + _PLATFORM_LIST,
        files=_NOT_PYTHON,
        needles=("gpu", "cuda"),
        reason='hard-coded "gpu"/"cuda" platform: never runs on TPU or CPU ("cuda": nor on ROCm)',
    ),
    ToolingRule(
        id="cuda-visible-devices",
        pattern=r"\b(?:CUDA|NVIDIA)_VISIBLE_DEVICES\b|\bCUDA_DEVICE_ORDER\b",
        files=_EVERYWHERE,
        needles=("visible_devices", "device_order"),
        reason="CUDA device selection: TPUs ignore it; ROCm expects ROCR_/HIP_VISIBLE_DEVICES",
    ),
    ToolingRule(
        id="gpu-jax-config",
        pattern=_any(
            r"\bjax_(?!cuda\d)\w*?(?:gpu|cuda)\w*",  # jax_cuda_*, jax_pallas_use_mosaic_gpu
            r"""\bconfig\.update\([ \t]*["']xla_gpu_\w+""",
            r"\bJAX_(?!CUDA\d)\w*?(?:GPU|CUDA)\w*",  # the same options as environment variables
        ),
        files=_EVERYWHERE,
        needles=("gpu", "cuda"),
        reason="GPU-only jax.config option: it does nothing, or fails, on other backends",
    ),
)
"""The default rules. Extend with the ``pytest_jaxport_tooling_rules`` hook or ``rules=``."""

_FILE_GROUPS: dict[str, tuple[str, ...]] = {"everywhere": _EVERYWHERE, "not-python": _NOT_PYTHON}

RULES += tuple(
    ToolingRule(
        id=found.id,
        pattern=found.pattern,
        files=_FILE_GROUPS[found.files],
        needles=found.needles,
        reason=found.reason,
    )
    for described in DESCRIPTIONS.values()
    for found in described.tooling
)
# ...and each platform's own tools and environment variables, from its description
# (model/platforms.py): Intel's oneAPI, SYCL and Level Zero.


def rule_ids(rules: Iterable[ToolingRule] = RULES) -> tuple[str, ...]:
    """The distinct rule ids, in rule order.

    >>> rule_ids()[:3]
    ('xla-gpu-flag', 'cuda-pin', 'cuda-image')
    """
    return tuple(dict.fromkeys(rule.id for rule in rules))


def summarize(assumptions: Iterable[Assumption]) -> dict[str, int]:
    """Assumptions per rule id, sorted by id (ids with none are absent)."""
    return dict(sorted(Counter(a.rule for a in assumptions).items()))


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
        body = _glob_regex(line)
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
            re.compile(_glob_regex(s) + r"\Z") for s in SKIPPED_DIRS if s not in plain
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
    body = _glob_regex(text)
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
        name_globs = [_glob_regex(g) for g in files if "/" not in g]
        path_globs = [_glob_regex(g.lstrip("/")) for g in files if "/" in g]
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
    file: str, text: str, *, rules: Sequence[ToolingRule] = RULES
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
    rules: Sequence[ToolingRule] = RULES,
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
    rules: Sequence[ToolingRule] = RULES,
    use_git: bool = True,
) -> tuple[Assumption, ...]:
    """Every NVIDIA-bound assumption under ``root``, sorted by file, line and rule.

    Skips what ``.gitignore`` ignores, the ``exclude`` globs (see :func:`list_project_files`),
    :data:`SKIPPED_DIRS`, virtual environments, symlinks, binary files and files over
    :data:`MAX_FILE_BYTES`. Each line is reported at most once per rule id. ``use_git=False``
    uses the built-in ``.gitignore`` matcher even inside a git work tree.
    """
    return scan_tree(root, exclude=exclude, rules=rules, use_git=use_git).assumptions
