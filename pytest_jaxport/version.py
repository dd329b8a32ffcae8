"""pytest-jaxport's version, in one place (reports, caches and the console script say it).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

__version__ = "0.1.0"

INSTALLED_FROM = "git+https://github.com/pytest-jaxport/pytest-jaxport"
"""Where pip installs pytest-jaxport from today: it is not on PyPI yet, so a requirement by
name alone (``pytest-jaxport[cuda]``) finds nothing (README, "Add it to your project").
Every install line the package says, and those of the examples, name it through
:func:`requirement`; ``tests/test_install_lines.py`` holds them to it."""


def requirement(extra: str = "") -> str:
    """pytest-jaxport (with ``extra``) as a requirement pip installs today.

    >>> requirement("cuda")
    'pytest-jaxport[cuda] @ git+https://github.com/pytest-jaxport/pytest-jaxport'
    """
    return f"pytest-jaxport{f'[{extra}]' if extra else ''} @ {INSTALLED_FROM}"
