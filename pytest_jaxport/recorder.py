"""Recording the computations a suite runs, and lowering each distinct one once.

``pytest --jaxport-audit`` installs :class:`Recorder` on the interception layer
(:mod:`pytest_jaxport._jax.interception`): every top-level jitted call that misses JAX's C++
dispatch cache is handed to :meth:`Recorder.record`, after JAX ran it. A call JAX has seen
before in this process (the same jaxpr object, the same argument types, shardings and
donation) costs two dictionary lookups. A new one gets a content key (the normalised jaxpr's
text, the argument types and shardings, donation, mesh: the same computation re-traced, traced
at another call site, or recorded by another pytest-xdist worker, gets the same key) and, when
the key is new too, is lowered for every configured platform exactly as ``jaxport.check`` does
(:meth:`~pytest_jaxport.examine.Examiner.audit`: the lowered cache, the absent platforms
lowered together, the same census and source lines) from the recorded jaxpr and argument
types, without tracing or running anything again. For the platform it ran on, JAX's own
cached lowering is read.

Nothing here may change what a test computes or whether it passes: the hook runs after JAX did
the call's work, any exception is recorded, never raised (see the interception layer).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from pytest_jaxport._jax.callbacks import INERT_TARGET
from pytest_jaxport._jax.devices import present_platforms
from pytest_jaxport._jax.interception import Interception, Support
from pytest_jaxport._jax.recorded_call import RecordedCall
from pytest_jaxport.cache import CompileSettings
from pytest_jaxport.examine import Examiner, KeyParts, shown_file
from pytest_jaxport.model.census import Classifier, SourceLocation, is_library_file
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.report.audit_ledger import (
    AuditTestRecord,
    ComputationRecord,
    FindingRecord,
    finding_kind,
)
from pytest_jaxport.report.audit_section import COMPILE_FINDING


class Recorder:
    """Records each test's computations; lowers and counts each distinct one once."""

    def __init__(
        self,
        *,
        platforms: Sequence[str],
        classifier: Classifier,
        rootdir: Path,
        compile_settings: CompileSettings,
        own_packages: tuple[str, ...] = (),
        judging: Callable[[], str | None] = lambda: None,
        eager_users: str = "owner",
    ) -> None:
        self.platforms = tuple(platforms)
        self._eager_users = eager_users
        self._judging = judging
        self._examiner = Examiner(
            classifier=classifier,
            rootdir=rootdir,
            compile_settings=compile_settings,
            own_packages=own_packages,
        )
        self.stats = self._examiner.stats
        self._rootdir = rootdir
        self.interception = Interception(self.record)
        self.support: Support | None = None
        self._by_jaxpr: dict[int, tuple[Any, dict[Any, str]]] = {}
        self._computations: dict[str, ComputationRecord] = {}
        self._unsent: list[str] = []
        self._uses: dict[str, None] = {}
        self._outside: dict[str, None] = {}
        self._in_test = False
        self._tests_begun = False
        self._calls = 0
        self._local = itertools.count()

    # -- the session's side ------------------------------------------------------------------

    def start(self) -> Support:
        """Install the hook (imports JAX); what this JAX lets the audit see."""
        self.support = self.interception.install()
        return self.support

    def stop(self) -> None:
        self.interception.uninstall()

    def begin_test(self) -> None:
        """A test starts: its first call of each of the suite's jitted functions passes the
        hook again, and of each eager op too with ``eager_users = "all"``. Else an eager op
        passes it in the first test that runs it only (:func:`report.audit_ledger.assemble`
        counts it there alone), one run while importing or collecting included: the first
        test empties every cache once."""
        every = self._eager_users == "all" or not self._tests_begun
        self._in_test = self._tests_begun = True
        self._uses = {}
        self.interception.clear_dispatch_caches(jax_own=every)

    def end_test(self, nodeid: str, index: int) -> AuditTestRecord:
        """What the test ran (and what this process saw first since the last record)."""
        compiles = self.interception.compiles
        record: AuditTestRecord = {
            "nodeid": nodeid,
            "index": index,
            "uses": list(self._uses),
            "outside": list(self._outside),
            "computations": [self._computations[cid] for cid in self._unsent],
            "calls": self._calls,
            "compiled_outside": compiles.outside,
            "errors": list(compiles.errors),
        }
        self._in_test = False
        self._uses = {}
        self._outside = {}
        self._unsent = []
        self._calls = 0
        compiles.outside = 0
        compiles.audited = 0
        compiles.errors.clear()
        return record

    # -- the hook's side ------------------------------------------------------------------------

    def record(self, call: RecordedCall) -> None:
        """One call that missed JAX's dispatch cache (the interception layer calls this)."""
        self._calls += 1
        jaxpr = call.jaxpr
        known = self._by_jaxpr.get(id(jaxpr))
        if known is None or known[0]() is not jaxpr:
            known = (weakref.ref(jaxpr, self._forget(id(jaxpr))), {})
            self._by_jaxpr[id(jaxpr)] = known
        try:
            signature: Any = call.signature()
            cid = known[1].get(signature)
        except TypeError:  # an unhashable parameter: key by its text instead
            signature = call.signature_text()
            cid = known[1].get(signature)
        if cid is None:
            cid = known[1][signature] = self._identify(call)
        (self._uses if self._in_test else self._outside)[cid] = None

    def _forget(self, key: int) -> Any:
        def forget(_: Any) -> None:
            self._by_jaxpr.pop(key, None)

        return forget

    def _identify(self, call: RecordedCall) -> str:
        """The content key of a call JAX traced anew; lowered and counted when new."""
        keyed = KeyParts(call, own=self._examiner.own_packages)
        parts = keyed.get()
        if parts is None:  # not keyable: a computation of this process only
            cid = f"local-{next(self._local)}-{id(call.jaxpr):x}"
        else:
            # Not the source lines: a trace JAX reuses from another call site (an eager op, a
            # jit called from two tests) is the same computation, whichever site traced it.
            # But its kind: an op run eagerly and a jit of the same program (`x ** 2`, and
            # `jax.jit(lambda x: x ** 2)`) are counted apart, each placed and owned by its
            # own rule (an eager op at its caller's line, in the first test that runs it),
            # which one computation of either kind would apply to the other's calls too.
            eager = ("eager",) if call.kind() == "eager" else ()  # (jits' ids as before)
            blob = "\n\0".join((parts[0], call.signature_text(), *eager))
            cid = hashlib.sha256(blob.encode()).hexdigest()[:16]
        if cid not in self._computations:
            self._computations[cid] = self._census(cid, call, keyed)
            self._unsent.append(cid)
        return cid

    def _census(self, cid: str, call: RecordedCall, keyed: KeyParts) -> ComputationRecord:

        facts = call.facts()
        present = present_platforms()
        # An op executed eagerly is placed where the suite called it, not at the lines of a
        # program JAX may have traced earlier at another call and reused: the same in every
        # process, whatever it ran before. A jitted function keeps its lines (the user's code
        # a library's jit calls, a vector field, keeps its own), but where an op's location
        # holds only a library's lines, it is where the suite called the function too.
        caller = _calling_line(self._examiner.own_packages)
        caller = caller if caller is None else self._examiner.shown_location(caller)
        # But an eager loop, branch or custom rule (`facts.bodies`) runs functions it was
        # given, traced for it with their own lines: each of their kernels is placed as in a
        # jit, at the line inside them that caused it (the loop's line only for what has none).
        at_caller = facts.kind == "eager" and not facts.bodies
        defined = _source_location(facts.source)
        judged = self._judged(
            call, keyed, facts.host_callbacks, present, caller, at_caller, defined
        )
        source = facts.source
        if source is not None:
            file, _, line = source.rpartition(":")
            shown = shown_file(file, self._rootdir) if file else None
            source = f"{shown}:{line}" if shown is not None else source
        return {
            "id": cid,
            "function": facts.function,
            "source": source,
            "kind": facts.kind,
            "signature": list(facts.signature),
            "shardings": list(facts.shardings),
            "static_arguments": facts.static_arguments,
            "donated": list(facts.donated),
            "mesh": facts.mesh,
            "host_callbacks": judged["host_callbacks"],
            "partitions": judged["partitions"],
            "platforms": judged["platforms"],
            "findings": judged["findings"],
        }

    def _judged(
        self,
        call: RecordedCall,
        keyed: KeyParts,
        shown_callbacks: Sequence[str],
        present: Sequence[str],
        caller: SourceLocation | None,
        at_caller: bool,
        defined: SourceLocation | None = None,
    ) -> dict[str, Any]:
        """The computation's census on every platform, and why a platform did not lower: as an
        earlier run judged it where nothing that decides it changed (the program, its
        signature, the platforms and those present, ``cache.judged_by``, the lines sites are
        placed at: the caller's and the computation's own, ``defined``), else lowered and
        counted now and kept for the next run."""
        judging = self._judging()  # None: a classify hook judges, so nothing is kept
        key = None
        if judging is not None:
            where = (
                *self.platforms, "present:", *sorted(present),
                f"at: {caller} {at_caller} {defined}",
            )  # fmt: skip
            scope = "\n\0".join((judging, call.signature_text(), *where))
            lowered = self._examiner.lowered
            key = lowered.judged_key(keyed, hashlib.sha256(scope.encode()).hexdigest())
            known = lowered.judged(key, len(self.platforms))
            if known is not None:
                return known
        # Host callbacks lower for the platforms not present as inert placeholders, counted in
        # `meta` at their source lines; a platform that still fails says it had callbacks. A
        # program partitioned over several devices also gets the collectives the SPMD
        # partitioner inserts (compiled here once, not run; recorded in the lowered cache).
        # Nothing runs: the runtime share is the roofline estimate.
        found = self._examiner.audit(
            call,
            keyed,
            self.platforms,
            present=present,
            caller=caller,
            at_caller=at_caller,
            source=defined,
            keep_programs=key is None,  # what it judged is kept instead, where it can be
        )
        host_callbacks = _host_callbacks(shown_callbacks, found.results.values())
        findings: list[FindingRecord] = []
        for platform, result in found.results.items():
            if result.error is None:
                if result.compile_error and result.compiled is None:  # lowered, not compiled
                    findings.append({"platform": platform, "kind": COMPILE_FINDING,
                                     "reason": result.compile_error})  # fmt: skip
                continue
            kind = finding_kind(host_callbacks, platform in present)
            reason = result.error
            if kind == "host-callback":
                reason = (
                    f"host callback ({', '.join(host_callbacks)}): a Python callback "
                    f"cannot be lowered for {platform} from here ({result.error})"
                )
            findings.append({"platform": platform, "kind": kind, "reason": reason})
        judged = {
            "host_callbacks": list(host_callbacks),
            "partitions": max((p.partitions for p in found.programs.values()), default=1),
            "platforms": Probe(name="", reference="", platforms=found.results).to_dict()[
                "platforms"
            ],
            "findings": findings,
        }
        if key is not None and found.keepable:
            self._examiner.lowered.keep_judged(key, judged)
        else:
            self._examiner.lowered.keep_programs(found.unkept)
        return judged


def _calling_line(own: tuple[str, ...]) -> SourceLocation | None:
    """The innermost frame of the running call that is the user's code (not JAX's, an
    installed library's, the standard library's, this plugin's, nor code with no file:
    ``is_library_file``)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if not is_library_file(file, own):
            return SourceLocation(file=file, line=frame.f_lineno)
        frame = frame.f_back
    return None


def _source_location(source: str | None) -> SourceLocation | None:
    """A function's definition, ``file:line`` as JAX records it, as a location."""
    if source is None:
        return None
    file, _, line = source.rpartition(":")
    return SourceLocation(file=file, line=int(line)) if file and line.isdigit() else None


def _host_callbacks(shown: Sequence[str], results: Iterable[PlatformProbe]) -> tuple[str, ...]:
    """The program's host-callback primitives: those its jaxpr ``shown``, and those only its
    lowering revealed (bound inside a custom primitive's lowering; each such callback is a
    placeholder ``inert_host_callback.<primitive>`` in an absent platform's census)."""
    found = dict.fromkeys(shown)
    for result in results:
        for kernel in result.census.kernels if result.census is not None else ():
            if kernel.name.startswith(f"{INERT_TARGET}."):
                found[kernel.name.partition(".")[2]] = None
    return tuple(found)
