"""One path for every computation: lower it per platform, add the collectives the SPMD
partitioner inserts, take each census, compile it where asked, estimate or measure where its
time goes. A checked function (:meth:`Examiner.check`) and an audited computation
(:meth:`Examiner.audit`) both go down it.

- :mod:`~pytest_jaxport.examine.examiner`: :class:`Examiner`, its two entry points and the
  shared path;
- :mod:`~pytest_jaxport.examine.lowered`: lowering per platform through the lowered cache,
  the partitioner's record, judged censuses (:class:`LoweredLevel`);
- :mod:`~pytest_jaxport.examine.placement`: the lines kernels and findings are shown at;
- :mod:`~pytest_jaxport.examine.compiled`: the compiled level (:class:`CompiledLevel`);
- :mod:`~pytest_jaxport.examine.share`: the runtime share, measured or estimated;
- :mod:`~pytest_jaxport.examine.stages`: the instrumentation hook (:class:`StageTimer`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from pytest_jaxport.examine.compiled import NO_VENDOR_OPTIONS, CompiledLevel, CompileStats
from pytest_jaxport.examine.examiner import Examined, Examiner, Run, Runner
from pytest_jaxport.examine.lowered import (
    KeyParts,
    LoweredLevel,
    LoweredPrograms,
    LoweredStats,
    failed_to_lower,
)
from pytest_jaxport.examine.placement import Placement, shown_file
from pytest_jaxport.examine.stages import Stages, StageTimer

__all__ = [
    "NO_VENDOR_OPTIONS",
    "CompileStats",
    "CompiledLevel",
    "Examined",
    "Examiner",
    "KeyParts",
    "LoweredLevel",
    "LoweredPrograms",
    "LoweredStats",
    "Placement",
    "Run",
    "Runner",
    "StageTimer",
    "Stages",
    "failed_to_lower",
    "shown_file",
]
