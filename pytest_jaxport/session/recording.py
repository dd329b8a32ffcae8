"""The audit recorder's session side: started where tests run, told when each test starts
and ends, settled before a pytest-xdist worker exits (the recorder: :mod:`pytest_jaxport.recorder`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import pytest

from pytest_jaxport.cache import judged_by
from pytest_jaxport.model.census import Classifier
from pytest_jaxport.session.settings import SessionSettings

if TYPE_CHECKING:
    from pytest_jaxport.recorder import Recorder
    from pytest_jaxport.report.audit_ledger import AuditRecord


class AuditRecording:
    """``--jaxport-audit`` in this process: the recorder's life and each test's record."""

    def __init__(self, config: pytest.Config, settings: SessionSettings) -> None:
        self.config = config
        self.project = settings.project
        self.compile_settings = settings.compile_settings
        self.audited = settings.audited
        """Whether ``--jaxport-audit`` records every computation the tests run."""
        self.recorder: Recorder | None = None
        self.interception: dict[str, object] | None = None
        """What the recorder hooked (JAX's version, the adapter), where it runs; the
        controller of pytest-xdist has it from the first record of each worker."""
        self._sent_interception = False
        self._index: dict[str, int] = {}
        self._judging: str | None = None

    def start(self, *, runs_tests: bool, classifier: Classifier) -> None:
        """Install the audit's hook where tests run (not on a pytest-xdist controller)."""
        if not self.audited or not runs_tests:
            return
        from pytest_jaxport.recorder import Recorder  # imports JAX: only for an audited run

        self.recorder = Recorder(
            platforms=self.project.platforms,
            classifier=classifier,
            rootdir=self.config.rootpath,
            compile_settings=self.compile_settings,
            own_packages=self.project.own_packages,
            judging=self.judging,
            eager_users=self.project.audit.eager_users,
        )
        self.interception = self.recorder.start().to_dict()

    def judging(self) -> str | None:
        """What, besides its program, decides an audited computation's census
        (:func:`~pytest_jaxport.cache.judged_by`); ``None`` while a ``pytest_jaxport_classify``
        hook is registered (a conftest's code is not covered: nothing judged is kept or read)."""
        if self.config.hook.pytest_jaxport_classify.get_hookimpls():
            return None
        if self._judging is None:
            self._judging = judged_by(
                self.compile_settings,
                rootdir=self.config.rootpath,
                own_packages=self.project.own_packages,
            )
        return self._judging

    def stop(self) -> None:
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None

    def settle(self) -> None:
        """An audited xdist worker ran its last test: unhook, collect the garbage, then freeze
        what is left (JAX's caches, grown by the lowerings for other platforms) out of the
        collector's way. This runs before the worker reports itself finished; after that,
        pytest-xdist gives it 5 seconds to exit before it interrupts it (SIGINT), and a full
        collection of that heap in every garbage-collector pass of its last steps could
        overrun them on a busy machine: a KeyboardInterrupt inside JAX's ``_xla_gc_callback``,
        printed as an unraisable-exception warning."""
        if self.recorder is None:
            return
        self.stop()
        gc.collect()  # (finalizers run now, as they would have at pytest's last collection)
        gc.freeze()

    def header_lines(self) -> list[str]:
        """The audit's line of pytest's header (unwrapped), when it is on."""
        if not self.audited:
            return []
        where = ", ".join(self.project.platforms)
        how = ""
        if self.interception is not None:
            hook = self.interception.get("adapter") or "compile events only"
            how = f" (jax {self.interception.get('jax')}, {hook})"
        return [f"jaxport: audit on: recording every jitted computation{how}; lowering for {where}"]

    def collected(self, items: Sequence[pytest.Item]) -> None:
        """Each test's place in the collection (which tests use a computation, in order)."""
        self._index = {item.nodeid: i for i, item in enumerate(items)}

    def begin_test(self) -> None:
        if self.recorder is not None:
            self.recorder.begin_test()

    def end_test(self, item: pytest.Item) -> AuditRecord | None:
        """At a test's teardown: the computations it ran, for its record (the first one this
        process sends also says what the recorder hooked)."""
        if self.recorder is None:
            return None
        ended = self.recorder.end_test(item.nodeid, self._index.get(item.nodeid, -1))
        audit = cast("AuditRecord", dict(ended))
        if not self._sent_interception:
            audit["interception"] = self.interception
            self._sent_interception = True
        return audit
