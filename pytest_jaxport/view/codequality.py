"""A report's findings as a GitLab Code Quality report (pure): the JSON list GitLab's
``artifacts:reports:codequality`` shows in a merge request's widget and diff.

Each of the view's alerts at the repository's lines (:attr:`ReportView.alerts
<pytest_jaxport.view.viewmodel.reportview.ReportView.alerts>`) is one issue: ``description``,
``check_name`` (the rule), ``fingerprint`` (the alert's, stable across runs), ``severity``
(``major`` for an error, ``minor`` for a warning, ``info`` for a note) and ``location``
(``path`` relative to the repository's root, ``lines.begin``).

Example::

    >>> from pytest_jaxport.view.viewmodel.alerts import Alert
    >>> alert = Alert(rule="custom-kernel", level="warning", file="src/k.py", line=74,
    ...               message="cuda: hand-written kernel", title="t", identity="x")
    >>> issue = code_quality([alert])[0]
    >>> issue["check_name"], issue["severity"], issue["location"]
    ('jaxport/custom-kernel', 'minor', {'path': 'src/k.py', 'lines': {'begin': 74}})

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_jaxport.view.viewmodel.alerts import Alert

SEVERITY = {"error": "major", "warning": "minor", "note": "info"}
"""GitLab's severity for each alert level (GitLab's are info, minor, major, critical,
blocker)."""


def code_quality(found: Iterable[Alert]) -> list[dict[str, Any]]:
    """The Code Quality issues for ``found``, in their order."""
    return [
        {
            "description": alert.message,
            "check_name": f"jaxport/{alert.rule}",
            "fingerprint": alert.fingerprint,
            "severity": SEVERITY[alert.level],
            "location": {"path": alert.file, "lines": {"begin": alert.line}},
        }
        for alert in found
    ]
