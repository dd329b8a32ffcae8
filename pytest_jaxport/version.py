"""pytest-jaxport's version, in one place (reports, caches and the console script say it).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

__version__ = "0.1.0"
