"""Findings where reviewers look: the SARIF 2.1.0 log GitHub code scanning, GitLab and Azure
DevOps show inline (pure: a view in, a log out).

:func:`render_sarif` writes the view's alerts
(:class:`~pytest_jaxport.view.viewmodel.alerts.Alerts`, the report's findings at the
repository's lines) as one SARIF run, with one rule per kind of finding (:data:`RULES`);
:func:`sarif_log` takes a report and builds its view. ``view.annotations`` lays out the same
alerts as GitHub Actions workflow commands, ``view.codequality`` as a GitLab Code Quality
report.

Locations are the report's, relative to pytest's rootdir (``uriBaseId`` ``%SRCROOT%``): a
site in an installed package or outside the rootdir has no line in the repository and is
left out of the results (counted in the run's properties, ``leftOut``).

Fingerprints (``partialFingerprints``) identify an alert without its line number
(:attr:`~pytest_jaxport.view.viewmodel.alerts.Alert.fingerprint`), so code scanning keeps
tracking it when lines above it move, and closes it when the site goes.

Example::

    >>> from pytest_jaxport.report.document import Config, Environment, Report, Summary
    >>> from pytest_jaxport.model.hotspots import Hotspot
    >>> site = Hotspot(platform="cuda", location="src/m.py:24", layer="vendor",
    ...                name="stablehlo.convolution", kind="convolution", library="cudnn",
    ...                checks=1, tests=1, dispatches=2)
    >>> report = Report(tool_version="1.0", environment=Environment(),
    ...     config=Config(platforms=("cpu", "cuda"), reference="cpu"),
    ...     summary=Summary(tests=1, checks=1, failed_tests=0, violations=0, outcomes={},
    ...                     platforms={}, hotspots=(site,)), tests=())
    >>> [result] = sarif_log(report)["runs"][0]["results"]
    >>> result["ruleId"], result["level"], result["locations"][0]["physicalLocation"]["region"]
    ('vendor-library', 'note', {'startLine': 24})
    >>> result["message"]["text"]
    'cuda: cudnn stablehlo.convolution, 2 dispatches in 1 check (1 test)'

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_jaxport.report.document import Report
from pytest_jaxport.version import __version__
from pytest_jaxport.view.viewmodel.alerts import Alert, AlertLevel
from pytest_jaxport.view.viewmodel.build import build_view
from pytest_jaxport.view.viewmodel.reportview import ReportView

PROJECT_URL = "https://github.com/pytest-jaxport/pytest-jaxport"
"""The project's home (``[project.urls]`` in pyproject.toml says the same; a test keeps them
equal). The rules' help links point into its docs."""
DOCS_URL = f"{PROJECT_URL}/blob/main/docs"
SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
"""The ``uriBaseId`` of every location: the repository's root (pytest's rootdir)."""
FINGERPRINT = "jaxportFinding/v1"
"""The key of an alert's fingerprint in ``partialFingerprints``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SarifRule:
    """One kind of finding (an alert's ``rule``): a SARIF ``reportingDescriptor``."""

    id: str
    name: str
    short: str
    full: str
    help: str
    """What to do about it."""
    docs: str
    """The docs page and section (``reference.md#...``), under :data:`DOCS_URL`."""
    level: AlertLevel
    """Its usual level, the rule's ``defaultConfiguration`` (an alert that fails a test or
    the gate is an ``error`` anyway)."""

    @property
    def help_uri(self) -> str:
        return f"{DOCS_URL}/{self.docs}"

    def to_sarif(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "shortDescription": {"text": self.short},
            "fullDescription": {"text": self.full},
            "help": {"text": self.help, "markdown": f"{self.help} [Docs]({self.help_uri})"},
            "helpUri": self.help_uri,
            "defaultConfiguration": {"level": self.level},
            "properties": {"tags": ["portability", "jax"]},
        }


RULES: tuple[SarifRule, ...] = (
    SarifRule(
        id="vendor-library",
        name="VendorLibraryCall",
        short="A vendor-library call on one platform",
        full="This line dispatches to a vendor library on the platform named (cuBLAS, cuDNN, "
        "cuFFT, cuSOLVER, NCCL on cuda; their ROCm and CPU counterparts elsewhere). Another "
        "backend usually has a counterpart, but the kernel, its speed and its numerics differ.",
        help="Nothing to do unless a budget says so: keep the count from growing with "
        "max_vendor_calls or max_library_calls, or a baseline.",
        docs="reference.md#classification-rules-lowered-level",
        level="note",
    ),
    SarifRule(
        id="custom-kernel",
        name="CustomKernel",
        short="A hand-written kernel to rewrite on other backends",
        full="This line runs a hand-written kernel (Pallas, Triton, Mosaic, an FFI custom call) "
        "on the platform named: each one is a rewrite on every backend it does not run on.",
        help="Keep a portable fallback (jax.lax.platform_dependent) and budget the kernel "
        "with max_custom_calls, or write its counterpart for the other backends.",
        docs="reference.md#classification-rules-lowered-level",
        level="warning",
    ),
    SarifRule(
        id="numeric-format",
        name="NumericFormat",
        short="A numeric format that does not port as it is",
        full="This line uses a numeric format another platform computes differently or not at "
        "all: float64 on TPU, a float8 variant of another vendor, a float32 dot at the default "
        "precision (TF32, one bfloat16 pass).",
        help="Set the precision or the format explicitly where it matters, or budget the "
        "findings with max_format_findings / forbid_formats.",
        docs="reference.md#numeric-formats-and-memory-layout",
        level="note",
    ),
    SarifRule(
        id="memory-layout",
        name="MemoryLayout",
        short="A memory layout that costs on the platform named",
        full="This line's shapes pad to the platform's tiles, miss its matrix-unit alignment, "
        "or make XLA insert relayouts around a library call.",
        help="Pick shapes that are multiples of the platform's tiles, or budget the waste "
        "with max_padding_waste / max_relayouts.",
        docs="reference.md#numeric-formats-and-memory-layout",
        level="note",
    ),
    SarifRule(
        id="does-not-lower",
        name="DoesNotLower",
        short="A check that does not lower for a platform",
        full="JAX cannot lower this check (or an audited computation) for the platform named: "
        "the code does not run there as it is. A platform in must_lower makes it a failure.",
        help="Read the lowering error in the report; add the platform to must_lower once it "
        "lowers, so it keeps lowering.",
        docs="reference.md#tooljaxportbudget-and-tooljaxportbudgetplatform",
        level="warning",
    ),
    SarifRule(
        id="does-not-fit",
        name="DoesNotFit",
        short="A check that does not fit a platform's device memory",
        full="The platform's compiler planned this check (or refused it) for more device "
        "memory than the device named has: arguments, outputs, temporaries and code, per "
        "device (per chip of a slice). A platform in must_lower makes it a failure.",
        help="Read the compiler's count in the report; shard the arguments over more devices, "
        "donate what the step replaces, checkpoint (jax.checkpoint) what it recomputes, or "
        "hold the plan under a limit with max_device_memory.",
        docs="reference.md#device-memory-in-the-reports",
        level="warning",
    ),
    SarifRule(
        id="does-not-compile",
        name="DoesNotCompile",
        short="A check that lowers but does not compile for a platform",
        full="The compile asked of this check (or an audited computation) for the platform "
        "named gave no program: the compiler refused it, it ran past compile_time_limit, or "
        "the compiler's worker died. Nothing is known of it at the compiled level. A "
        "platform in must_lower makes it a failure where the compiler is the device's own "
        "(tpu).",
        help="Read the compiler's words in the report (they name the line); change the code, "
        "the device or compile_time_limit, or leave the platform out of compile.",
        docs="reference.md#tooljaxportbudget-and-tooljaxportbudgetplatform",
        level="warning",
    ),
    SarifRule(
        id="budget-violation",
        name="BudgetViolation",
        short="A portability budget is exceeded",
        full="A check found more than its budget allows on the platform named (a key of "
        "[tool.jaxport.budget], a platform's table or the test's marker): the test fails.",
        help="Remove the kernels at this line, or raise the limit where it was set, or drop "
        "the limit and keep the count from growing with a baseline.",
        docs="reference.md#tooljaxportbudget-and-tooljaxportbudgetplatform",
        level="error",
    ),
    SarifRule(
        id="numerics-difference",
        name="NumericsDifference",
        short="Outputs differ across backends",
        full="The check's outputs on the platform named differ from the reference platform's "
        "beyond the tolerance (on this machine, emulated, or on another CI leg).",
        help="Compare the differing leaves in the report; loosen rtol/atol for the dtype "
        "where the difference is expected, or fix the code where it is not.",
        docs="reference.md#tooljaxporttolerancedtype-and-tooljaxporttoleranceplatformdtype",
        level="error",
    ),
    SarifRule(
        id="numerics-may-differ",
        name="NumericsMayDiffer",
        short="Outputs may differ on the chip (emulated)",
        full="Emulated for the platform named, the check's outputs matched the reference, "
        "but an op the emulation cannot compute as that platform's chip does (its "
        "transcendental functions, reduction order, decompositions) has a measured error "
        "that moves them beyond the tolerance, or no measured bound.",
        help="Loosen rtol/atol for that platform's dtype where an error of the measured size "
        "is acceptable; run the check on the platform to know.",
        docs="reference.md#may-differ-what-the-chip-may-do",
        level="warning",
    ),
    SarifRule(
        id="tooling-assumption",
        name="ToolingAssumption",
        short="An NVIDIA-bound tooling assumption",
        full="This line assumes NVIDIA tooling (nvidia-smi, CUDA_VISIBLE_DEVICES, a cuda "
        "package pin...) that another backend's machines do not have.",
        help="Make it conditional on the platform, or budget the assumptions with "
        "max_tooling_assumptions.",
        docs="tooling.md",
        level="note",
    ),
)
"""Every kind of finding, each one SARIF rule."""

RULE_IDS = tuple(rule.id for rule in RULES)


def _result(alert: Alert) -> dict[str, Any]:
    return {
        "ruleId": alert.rule,
        "ruleIndex": RULE_IDS.index(alert.rule),
        "level": alert.level,
        "message": {"text": alert.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": alert.file, "uriBaseId": SRCROOT},
                    "region": {"startLine": alert.line},
                }
            }
        ],
        "partialFingerprints": {FINGERPRINT: alert.fingerprint},
    }


def sarif_log(report: Report, *, outside: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """``report`` as one SARIF 2.1.0 log (see :func:`render_sarif`)."""
    return render_sarif(build_view(report), outside=outside)


def render_sarif(
    view: ReportView, *, outside: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    """The view's alerts as one SARIF 2.1.0 log: one run, its tool driver pytest-jaxport with
    every rule (:data:`RULES`), one result per alert at a line of the repository (``outside``
    tells a file that is not the repository's though it looks relative:
    :meth:`~pytest_jaxport.view.viewmodel.alerts.Alerts.in_repository`)."""
    head = view.headline
    found = view.alerts.in_repository(outside=outside)
    properties: dict[str, Any] = {
        "platforms": list(head.platforms),
        "reference": head.reference,
        "leftOut": view.alerts.left_out(outside=outside),
    }
    if head.legs:
        properties["legs"] = list(head.legs)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "pytest-jaxport",
                        "version": head.tool_version or __version__,
                        "informationUri": PROJECT_URL,
                        "rules": [rule.to_sarif() for rule in RULES],
                    }
                },
                "originalUriBaseIds": {
                    SRCROOT: {"description": {"text": "The repository's root (pytest's rootdir)."}}
                },
                "results": [_result(a) for a in found],
                "columnKind": "unicodeCodePoints",
                "properties": properties,
            }
        ],
    }
