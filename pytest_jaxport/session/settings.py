"""The pytest session's settings, one typed value: what ``[tool.jaxport]``, the
``--jaxport-*`` options and the ``verbosity_jaxport`` ini value asked for, read and validated
once where the plugin configures (:func:`pytest_jaxport.plugin.session_settings`), then handed
to every part of the session.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_jaxport.cache import CompileSettings
from pytest_jaxport.model.config import ProjectConfig
from pytest_jaxport.model.cost import CostModel
from pytest_jaxport.report.ci import CISettings
from pytest_jaxport.view.annotations import AnnotationMode
from pytest_jaxport.view.display import DisplayOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportRequest:
    """What ``--jaxport-report`` asked for: the report at the end, and the files to write.

    >>> ReportRequest.of(["-", "r.json", "r.html"])
    ReportRequest(requested=True, files=('r.json', 'r.html'))
    >>> ReportRequest.of(None).requested
    False
    """

    requested: bool = False
    """Whether ``--jaxport-report`` was given (the report is printed at the end)."""
    files: tuple[str, ...] = ()
    """Every ``--jaxport-report=PATH`` given, as given: each is written, by its suffix."""

    @classmethod
    def of(cls, report: str | Sequence[str] | None) -> ReportRequest:
        """From the option's value (one PATH, each PATH given (``-``: none), or ``None``)."""
        given = [report] if isinstance(report, str) else list(report or ())
        return cls(requested=bool(given), files=tuple(g for g in given if g != "-"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSettings:
    """Everything the session's parts read of the user's configuration, in one value."""

    project: ProjectConfig
    """``[tool.jaxport]``, with ``--jaxport-platforms``, ``-compile`` and ``-emulate`` over it."""
    compile_settings: CompileSettings = field(default_factory=CompileSettings)
    """The compiled and lowered levels: caches, devices, the compilers without a device."""
    ci: CISettings = field(default_factory=CISettings)
    """Saved outputs and the baseline (``--jaxport-save-outputs``, ``--jaxport-baseline*``)."""
    report: ReportRequest = field(default_factory=ReportRequest)
    """``--jaxport-report``: printed at the end, and the files written."""
    display: DisplayOptions = field(default_factory=DisplayOptions)
    """How much the report shows (``--jaxport-report-*``, ``verbosity_jaxport``, ``-v``/``-q``)."""
    annotations: AnnotationMode | None = None
    """``--jaxport-annotations``; ``None``: by the environment at the end of the run."""
    audited: bool = False
    """Whether the audit records every computation the tests run (``--jaxport-audit`` or
    ``[tool.jaxport] audit``)."""
    cost_model: CostModel = field(default_factory=CostModel)
    """Days per rewrite and fallback (``[tool.jaxport.cost]``)."""
