"""The whole package (``pytest_jaxport/**``) against the house rules of issue 54: one job per
module, one name per thing, functions that read in one breath, the report typed from end to
end, and docs whose every reference to a module or name is still true.

Each rule is a figure measured on the package's own source with :mod:`ast`, against the limit
issue 54 set; a change that breaks one fails here with the modules or functions that broke it.
The references are checked by importing what they name (CONTRIBUTING.md: "House rules").
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest_jaxport

PACKAGE = Path(pytest_jaxport.__file__).parent


def _modules() -> Iterator[tuple[Path, str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        yield path.relative_to(PACKAGE.parent), text, ast.parse(text)


def _definitions(tree: ast.Module) -> list[ast.FunctionDef | ast.ClassDef]:
    return [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def test_no_module_is_over_1500_lines_and_at_most_6_over_1000() -> None:
    lines = {str(path): text.count("\n") for path, text, _ in _modules()}
    assert {path: n for path, n in lines.items() if n > 1500} == {}
    over = sorted(path for path, n in lines.items() if n > 1000)
    assert len(over) <= 6, over


def test_no_module_has_more_than_60_top_level_definitions() -> None:
    crowded = {
        str(path): len(_definitions(tree))
        for path, _, tree in _modules()
        if len(_definitions(tree)) > 60
    }
    assert crowded == {}


def test_at_most_3_public_names_are_defined_in_more_than_one_module() -> None:
    where: dict[str, list[str]] = {}
    for path, _, tree in _modules():
        if path.name == "__init__.py":
            continue
        for node in _definitions(tree):
            if not node.name.startswith("_"):
                where.setdefault(node.name, []).append(str(path))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert len(twice) <= 3, twice


def test_at_most_2_functions_are_80_lines_or_longer() -> None:
    long = [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, _, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 >= 80
    ]
    assert len(long) <= 2, long


def test_no_json_round_trip_in_the_package() -> None:
    round_trip = re.compile(r"json\.loads\(\s*json\.dumps\(")
    found = [str(path) for path, text, _ in _modules() if round_trip.search(text)]
    assert found == []


def _any_in(tree: ast.Module) -> int:
    """``Any`` as the code names it: each ``ast.Name`` node, and each inside an annotation (or
    a ``cast``'s type) written as a string."""
    count = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "Any")
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            annotations += [a.annotation for a in every if a.annotation is not None]
            annotations += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            annotations += [node.args[0]] if node.func.id == "cast" else []
    for annotation in annotations:
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                try:
                    written = ast.parse(node.value, mode="eval")
                except SyntaxError:
                    continue
                count += sum(
                    1 for n in ast.walk(written) if isinstance(n, ast.Name) and n.id == "Any"
                )
    return count


def test_any_is_used_at_most_175_times() -> None:
    """Issue 40 brought the typed report to 175 uses of ``Any``; issue 54 brought it back."""
    uses = {str(path): _any_in(tree) for path, _, tree in _modules()}
    most = sorted(uses.items(), key=lambda item: -item[1])[:10]
    assert sum(uses.values()) <= 175, f"{sum(uses.values())} uses of Any; most in {most}"


def test_the_view_calls_get_at_most_25_times() -> None:
    """A view that reads typed fields has little to ``.get(``: a mapping's optional entry, not
    a report's field (issue 40's figure, 25)."""
    calls = {
        str(path): sum(
            1
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
        )
        for path, _, tree in _modules()
        if path.parts[1] == "view"
    }
    assert sum(calls.values()) <= 25, {path: n for path, n in calls.items() if n}


ROOT = PACKAGE.parent
_DOTTED = re.compile(r"pytest_jaxport(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_SHORT = re.compile(r"`((?:_jax|model|report|view|examine|session)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
_FILE_NAME = re.compile(r"\.(json|md|py|toml|html|sarif|txt|npz|css|ya?ml|whl)$")
_NOT_REFERENCES = frozenset({"report.jaxport", "report.config", "session.stop"})
"""Short forms that name no module: pytest's test report's attributes (``report.jaxport``,
``report.config``) and a profiler session's method."""


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` imports as a module, or is a module and a chain of its attributes
    (a dataclass's field counts as its attribute)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for name in parts[end:]:
            if hasattr(found, name):
                found = getattr(found, name)
            elif name in (getattr(found, "__dataclass_fields__", None) or {}):
                found = None
            else:
                return False
        return True
    return False


def _documents() -> Iterator[Path]:
    yield from sorted(PACKAGE.rglob("*.py"))
    yield from sorted((ROOT / "tests").glob("*.py"))  # the modules each test file names
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield from sorted((ROOT / "benchmarks").rglob("*.md"))
    yield from (ROOT / name for name in ("README.md", "CONTRIBUTING.md", "calibration/README.md"))


def test_every_reference_to_a_module_or_name_in_the_docs_resolves() -> None:
    """``pytest_jaxport.model.census.take_census`` in a docstring, a comment or a document
    (and, in the documents and docstrings, its short form ```model.census.take_census```)
    names a module and a name that exist: a move that leaves one behind fails here."""
    stale = []
    for path in _documents():
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        found = {m.group(0).rstrip(".") for m in _DOTTED.finditer(text)}
        short = [] if path.parent == ROOT / "tests" else _SHORT.finditer(text)
        found |= {
            f"pytest_jaxport.{m.group(1)}"
            for m in short
            if m.group(1) not in _NOT_REFERENCES and not _FILE_NAME.search(m.group(1))
        }
        stale += [f"{path.relative_to(ROOT)}: {ref}" for ref in sorted(found) if not _resolves(ref)]
    assert not stale, "stale references (move them with the name):\n" + "\n".join(stale)
