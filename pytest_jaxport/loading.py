"""How the package's modules load under pytest: by Python's own import system, not through
pytest's assertion-rewriting import hook.

pytest loads every module of an installed plugin through that hook, to rewrite its asserts.
Ours opt out (``PYTEST_DONT_REWRITE`` in each docstring), but the hook still reads each one's
source, parses it into an AST and compiles that, wherever it cannot keep bytecode of its own
(``PYTHONDONTWRITEBYTECODE=1``, as many CI images set; a read-only install): about 0.4 s of
CPU in every session for this package's modules, with the bytecode an install wrote beside
them unread. Imported first (``pytest_jaxport/__init__.py``), this module puts
:class:`OwnModules` ahead of the hook: the package's submodules load as any library's, from
their bytecode where it exists, else compiled straight from the source.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType

PACKAGE = __name__.rpartition(".")[0]


class OwnModules:
    """A finder for the package's submodules that answers as Python's path finder does
    without pytest's hook (nothing else: other modules go on to the next finder).

    >>> OwnModules().find_spec("json.decoder", None) is None
    True
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is None or not fullname.startswith(f"{PACKAGE}."):
            return None
        return PathFinder.find_spec(fullname, path)


def install() -> None:
    """Put :class:`OwnModules` first among ``sys.meta_path``'s finders, once a process
    (pytester's in-process runs import the package again; the finder of the first stays)."""
    if not any(
        (type(f).__module__, type(f).__qualname__) == (__name__, OwnModules.__qualname__)
        for f in sys.meta_path
    ):
        sys.meta_path.insert(0, OwnModules())


install()
