"""Tests of the install lines: pytest_jaxport.version.INSTALLED_FROM, the docs, the messages.

Every install line a user reads works today (issue 50): pytest-jaxport is not on PyPI yet,
so a line that installs it by name alone (``pip install "pytest-jaxport[cuda]"``, a CI job's
``pip install -e .`` that leaves the ``jaxport`` command to a dependency by name) finds
nothing. The README, the docs, the examples and the plugin's own messages are read here,
each ``pip install`` line parsed as pip reads its requirements, and pytest-jaxport held to
where it installs from (:data:`pytest_jaxport.version.INSTALLED_FROM`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pytest_jaxport._jax.deviceless import cuda_plugin_problem
from pytest_jaxport.model.libtpu import pair_verdict
from pytest_jaxport.version import INSTALLED_FROM, requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
READ = sorted(
    {
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        *ROOT.glob("docs/*.md"),
        *(p for p in ROOT.glob("examples/**/*") if p.is_file() and p.suffix in (".md", ".yml")),
        *ROOT.glob("examples/**/Dockerfile"),
    }
)
"""What users read: the README, the changelog, the docs and every example."""

_COMMAND = re.compile(r"pip install\s+(.+)")
_TOKEN = re.compile(r"\"[^\"]*\"|'[^']*'|\S+")
_VALUED = {"-r", "-c", "--find-links", "-f", "--index-url", "-i", "--extra-index-url",
           "--target", "-t"}  # fmt: skip
_PATH = re.compile(r"^(\.|/|dist/|[A-Za-z]:\\)|\.whl(\[|$)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _workflow_env() -> dict[str, str]:
    """The workflow's ``env:`` values, as the shell sees them in its steps."""
    return dict(re.findall(r'^  ([A-Z_]+): "([^"]*)"', WORKFLOW.read_text(), re.M))


def commands(text: str, *, markdown: bool) -> list[str]:
    """Each ``pip install`` command of ``text``: a line of a file or a code block, or (in
    Markdown) an inline code span, joined where the prose wraps it."""
    lines = text.splitlines()
    if markdown:
        blocks = _FENCE.findall(text)
        prose = _FENCE.sub("", text)
        spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
        lines = [line for block in blocks for line in block.splitlines()] + spans
    return [m.group(1).strip() for line in lines for m in [_COMMAND.search(line)] if m]


def requirements(arguments: str, env: dict[str, str], *, prose: bool = False) -> list[str]:
    """What pip installs from one command's ``arguments``: requirements and paths, options
    and their values left out, shell variables expanded from ``env``, up to the end of the
    command (``&&``, ``;``, a comment). In ``prose`` (a message), the quoted requirements
    that follow ``pip install``, up to the first word of the sentence."""
    for name, value in env.items():
        arguments = arguments.replace(f"${{{name}}}", value)
    arguments = re.sub(r"\$\{\{.*?\}\}", "", arguments)  # a GitHub expression: the job's own
    found, skip = [], False
    for token in _TOKEN.findall(arguments):
        quoted = token[:1] in "\"'" and token[:1] == token[-1:] and len(token) > 1
        if token in ("&&", ";", "||", "|") or token.startswith("#"):
            break
        if prose and not quoted and not token.startswith("-"):
            break
        token = token[1:-1] if quoted else token.rstrip(";")
        if skip or re.search(r"<[^>]*>", token):
            skip = False  # an option's value, a placeholder
            continue
        if token in _VALUED:
            skip = True
        elif not token.startswith("-"):
            found.append(token)
    return found


def _problems(where: str, arguments: str, env: dict[str, str], *, prose: bool = False) -> list[str]:
    said = []
    for wanted in requirements(arguments, env, prose=prose):
        if wanted.startswith("git+"):
            if wanted != INSTALLED_FROM:
                said.append(f"{where}: {wanted!r} is not {INSTALLED_FROM}")
            continue
        if _PATH.search(wanted):
            continue
        try:
            parsed = Requirement(wanted)
        except InvalidRequirement as e:
            said.append(f"{where}: {wanted!r} is no requirement pip reads ({e})")
            continue
        if canonicalize_name(parsed.name) == "pytest-jaxport" and parsed.url != INSTALLED_FROM:
            said.append(f"{where}: {wanted!r} installs pytest-jaxport by name, not on PyPI yet")
    return said


def test_every_install_line_users_read_installs_what_exists() -> None:
    env = _workflow_env()
    problems, lines = [], 0
    for path in READ:
        for arguments in commands(path.read_text(), markdown=path.suffix == ".md"):
            lines += 1
            problems += _problems(f"{path.relative_to(ROOT)}: pip install {arguments}", arguments,
                                  env)  # fmt: skip
    assert lines >= 10  # the scan reads the lines it is about
    assert problems == []


def test_the_workflows_jobs_install_pytest_jaxport_from_where_it_is() -> None:
    """Both jobs run ``pytest --jaxport-*`` or ``jaxport``: each install installs it."""
    env = _workflow_env()
    installs = [
        arguments
        for arguments in commands(WORKFLOW.read_text(), markdown=False)
        if arguments != "--upgrade pip"
    ]
    assert len(installs) == 2  # the legs' and the merge's
    for arguments in installs:
        assert requirement() in requirements(arguments, env), arguments


def test_the_missing_cuda_plugin_message_installs_what_exists() -> None:
    problem = cuda_plugin_problem()
    if problem is None or "not installed" not in problem:
        pytest.skip("the jax CUDA plugin is installed here: its message is not said")
    [arguments, *_] = commands(problem, markdown=False)
    assert _problems("the missing-plugin message", arguments, {}, prose=True) == []
    assert f'pip install "{requirement("cuda")}" installs it' in problem


def test_the_missing_libtpu_message_installs_what_exists() -> None:
    """``compile = ["tpu"]`` without libtpu names the extra as pip installs it today."""
    problem = pair_verdict("0.10.2", None, pinned="0.0.42.*").problem
    [arguments, *_] = commands(problem, markdown=False)
    assert _problems("the missing-libtpu message", arguments, {}, prose=True) == []
    assert f'pip install "{requirement("tpu")}" installs' in problem


def test_installed_from_is_the_projects_repository() -> None:
    """One fact: where pytest-jaxport installs from is its repository's URL."""
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert f"git+{urls['Repository']}" == INSTALLED_FROM
