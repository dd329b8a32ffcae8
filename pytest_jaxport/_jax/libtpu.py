"""Compile for TPU without a TPU: libtpu in a worker process of its own
(:mod:`pytest_jaxport._jax.tpu_worker`), fed each check's lowered module, bounded in time.

Why a worker and not this process (docs/architecture.md has the decision and its numbers):
a mismatched jax/libtpu pair crashes the process that loads it; some programs compile for
minutes and a compile cannot be interrupted; libtpu takes a machine-wide lockfile and writes
to file descriptor 2; and the CPU backend checks run on must not change. The worker is
started once per test process: as collection ends where the compiled cache is empty (every
compile is a miss, and the worker imports JAX while the first tests run), else at the first
compile the cache does not hold (a run whose compiles are all cached starts none); killed at
the time limit and started again for the next compile; its output never reaches the user's.

Nothing here imports libtpu: only the worker does. This module imports JAX only inside
:func:`module_bytes` and :func:`prefer_cpu_backend`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path
from typing import IO, Any

from pytest_jaxport.model.census import CompiledMemory
from pytest_jaxport.model.libtpu import (
    CompiledModule,
    PairVerdict,
    Topology,
    pair_verdict,
    pinned_libtpu,
    probe_problem,
)

WORKER = Path(__file__).with_name("tpu_worker.py")

_BOOT = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
"""Runs the worker by its path: its folder is not put on ``sys.path`` (this package's
``profile.py`` would shadow the standard library's), and the package need not be importable
the way the test process found it."""

WORKER_ENVIRONMENT: Mapping[str, str] = {
    # JAX itself stays on its CPU backend: the worker compiles against a topology, and never
    # opens a TPU a TPU host's test process holds.
    "JAX_PLATFORMS": "cpu",
    # Several processes may load libtpu at once (pytest-xdist's workers, a TPU host's test
    # process): without it the second fails on /tmp/libtpu_lockfile.
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}
"""Set in the worker's environment, whatever the test process has."""

WORKER_DEFAULTS: Mapping[str, str] = {
    # Without them libtpu writes five lines to file descriptor 2 at start (the compiled
    # programs are identical with or without: research §1d); a TPU host's own values win.
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
}

START_LIMIT = 300.0
"""Seconds the worker may take to start (import JAX), and again to make a topology (load
libtpu, start its compiler), before it counts as hung: a loaded 2-core machine took 14 s to
import JAX. Neither counts against ``compile_time_limit``, which bounds a module's compile."""

SETTINGS = ("jax_use_shardy_partitioner",)
"""The test process's JAX settings the worker takes over: they decide how a lowered module
is partitioned."""


class CompileFailure(Exception):
    """A compile without a TPU that gave no program: the compiler refused it (``stage``
    ``compile``), no topology was made (``topology``), it ran past the limit (``timeout``),
    the worker died (``crash``) or did not start (``start``)."""

    def __init__(self, message: str, *, stage: str) -> None:
        super().__init__(message)
        self.stage = stage


def installed(distribution: str) -> str | None:
    """The installed version of ``distribution``, or ``None``."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def installed_pair() -> tuple[str, str | None, str | None]:
    """The installed jax, libtpu (``None``: none) and the libtpu jax pins for ``jax[tpu]``."""
    jax = installed("jax") or ""
    try:
        pinned = pinned_libtpu(requires("jax") or ())
    except PackageNotFoundError:
        pinned = None
    return jax, installed("libtpu"), pinned


def installed_verdict() -> PairVerdict:
    """Whether the installed pair compiles together, read from package metadata (nothing is
    loaded): :func:`pytest_jaxport.model.libtpu.pair_verdict`; to be probed where
    ``TPU_LIBRARY_PATH`` names a ``libtpu.so`` of its own (JAX loads that one)."""
    jax, libtpu, pinned = installed_pair()
    if libtpu is not None and foreign_library() is not None:
        return PairVerdict()  # a libtpu.so of its own: its release is not the package's
    return pair_verdict(jax, libtpu, pinned=pinned)


def foreign_library() -> str | None:
    """The ``libtpu.so`` ``TPU_LIBRARY_PATH`` names in place of the installed package's (JAX
    loads that one), or ``None`` where it names none or the package's own (JAX sets it so
    once it has loaded libtpu)."""
    named = os.environ.get("TPU_LIBRARY_PATH")
    if not named:
        return None
    import importlib.util

    spec = importlib.util.find_spec("libtpu")  # finds the package; loads nothing
    locations = spec.submodule_search_locations if spec is not None else None
    for folder in locations or ():
        own = Path(folder) / "libtpu.so"
        if own.exists() and Path(named).resolve() == own.resolve():
            return None
    return named


def probe(time_limit: float = START_LIMIT) -> str | None:
    """Load libtpu once in a process of its own and compile a small program for v5e:
    ``None`` where that worked, else the message saying what happened and how to fix it.
    For a pair neither pinned nor measured (:attr:`PairVerdict.probe`)."""
    jax, libtpu, pinned = installed_pair()
    compiler = TpuCompiler(time_limit=time_limit)
    try:
        compiler.compile(
            PROBE_MODULE.encode(),
            Topology(name="v5e:1x1", generation="v5e", devices=1),
            partitions=1,
        )
    except CompileFailure as failure:
        return probe_problem(jax, libtpu or "?", pinned, str(failure))
    finally:
        compiler.close()
    return None


PROBE_MODULE = """module @jit_probe {
  func.func public @main(%arg0: tensor<8x128xf32>) -> (tensor<8x128xf32>) {
    %0 = stablehlo.add %arg0, %arg0 : tensor<8x128xf32>
    return %0 : tensor<8x128xf32>
  }
}
"""
"""A module the probe compiles (MLIR text: the worker parses text and bytecode alike)."""


class TpuCompiler:
    """The worker, from the test process's side: :meth:`compile` sends a lowered module and
    waits at most ``time_limit`` seconds for the answer. One per test process, used by one
    thread at a time (a lock keeps it so); :meth:`close` ends it."""

    def __init__(self, *, time_limit: float, start_limit: float = START_LIMIT) -> None:
        self.time_limit = time_limit
        self.start_limit = max(start_limit, time_limit)
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = b""
        self._ready: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self.started = 0
        """Workers started (a compile past the limit starts another)."""
        self._phase = ""
        """What the worker said it was doing before its reply (``topology``: making one)."""
        self._death = ""
        """How the last worker died, without its numbers, until a compile succeeds."""
        self.given_up: str | None = None
        """Why no worker is started any more: one died making its topology, or two died
        the same way in a row (each would again: a bad ``LIBTPU_INIT_ARGS``, a libtpu that
        aborts); every later compile fails at once, saying so."""

    # -- the worker's life ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker now without waiting for it (it imports JAX while tests run), where
        compiles are certain; not on a TPU host, whose checks compile on the chip."""
        if tpu_chips_attached():
            return
        with self._lock:
            self._spawn()

    def _spawn(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        self._discard()
        environment = {**WORKER_DEFAULTS, **os.environ, **WORKER_ENVIRONMENT}
        # the worker's standard error, read back only for its last words when it dies
        self._stderr = tempfile.TemporaryFile(prefix="jaxport-libtpu-")  # noqa: SIM115
        self._process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=environment,
            start_new_session=True,  # its own group: killed whole, never sent the user's ^C
        )
        self._buffer = b""
        self._ready = None
        self._phase = ""
        self.started += 1

    def _discard(self) -> None:
        """Kill the worker (its whole process group) and forget it."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._ready = None

    def close(self) -> None:
        """End the worker (its standard input closes; killed if it does not end)."""
        with self._lock:
            process = self._process
            if process is not None and process.poll() is None and process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
            self._discard()

    @property
    def versions(self) -> Mapping[str, str]:
        """``jax`` and ``libtpu`` as the worker reported them (empty before it started)."""
        ready = self._ready or {}
        return {key: str(ready[key]) for key in ("jax", "libtpu") if key in ready}

    # -- one compile --------------------------------------------------------------------------

    def compile(
        self,
        module: bytes,
        topology: Topology,
        *,
        partitions: int,
        options: Mapping[str, object] | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> CompiledModule:
        """Compile ``module`` (MLIR bytecode or text, lowered for tpu) for ``topology``,
        partitioned over ``partitions`` of its devices. Raises :class:`CompileFailure`."""
        header = {
            "topology": topology.name,
            "host_bounds": list(topology.host_bounds),
            "partitions": partitions,
            "options": {k: v for k, v in (options or {}).items()},
            "settings": dict(settings or {}),
            "size": len(module),
        }
        with self._lock:
            if self.given_up is not None:
                raise CompileFailure(self.given_up, stage="crash")
            self._spawn()
            if self._ready is None:
                self._ready = self._handshake()
            process = self._process
            assert process is not None
            assert process.stdin is not None
            try:
                process.stdin.write(json.dumps(header, default=str).encode() + b"\n")
                process.stdin.write(module)
                process.stdin.flush()
            except OSError:
                raise self._died("while reading the module") from None
            self._phase = ""
            reply = self._line(self.time_limit, topology=topology.name)
            while "phase" in reply:  # it makes the topology first; its reply follows
                self._phase = str(reply["phase"])
                # making a topology is the worker's start (libtpu loads, its compiler warms
                # up): under the start's limit, never counted against the module's compile
                making = self._phase in ("topology", "warm")
                limit = self.start_limit if making else self.time_limit
                reply = self._line(limit, topology=topology.name, making=making)
            self._death = ""  # it answered: a death before was not for every compile
        if not reply.get("ok"):
            raise CompileFailure(str(reply.get("error", "")), stage=str(reply.get("stage")))
        memory = reply.get("memory")
        return CompiledModule(
            hlo=str(reply["hlo"]),
            memory=CompiledMemory.from_stats(memory) if isinstance(memory, dict) else None,
            device_kind=str(reply.get("device_kind", "")),
            seconds=float(reply.get("seconds", 0.0)),
        )

    def _handshake(self) -> dict[str, Any]:
        ready = self._line(self.start_limit, starting=True)
        if not ready.get("ready"):
            self._discard()
            raise CompileFailure(
                f"the libtpu worker did not start: {ready.get('error', '')}", stage="start"
            )
        return ready

    def _line(
        self, limit: float, *, starting: bool = False, topology: str = "", making: bool = False
    ) -> dict[str, Any]:
        """The worker's next reply, waiting at most ``limit`` seconds; past it the worker is
        killed (the next compile starts another). ``starting``: its start; ``making``: it
        makes ``topology`` (loading libtpu); else it compiles a module."""
        process = self._process
        assert process is not None
        assert process.stdout is not None
        deadline = time.monotonic() + limit
        stream = process.stdout
        with selectors.DefaultSelector() as selector:
            selector.register(stream, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(timeout=left):
                    self._discard()
                    if starting:
                        raise CompileFailure(
                            f"the libtpu worker did not start within {limit:.0f} s",
                            stage="start",
                        )
                    if making:  # still its start: "... timed out while making ..."
                        raise CompileFailure(
                            f"the libtpu worker timed out {self._doing(topology)} (after "
                            f"{limit:.0f} s, the start's limit)",
                            stage="start",
                        )
                    raise CompileFailure(
                        f"compile exceeded {limit:g} s on tpu ({topology})", stage="timeout"
                    )
                chunk = os.read(stream.fileno(), 1 << 20)
                if not chunk:
                    raise self._died("while starting" if starting else self._doing(topology))
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            found = json.loads(line)
        except ValueError:
            raise self._died("with a reply it could not finish") from None
        if not isinstance(found, dict):
            raise self._died("with a reply it could not finish")
        return found

    def _doing(self, topology: str) -> str:
        """What the worker was doing when it ended, as its failure says it."""
        if self._phase == "topology":
            return f"while making the topology {topology} (loading libtpu)"
        if self._phase == "warm":
            return f"while warming up libtpu's compiler for {topology}"
        return "while compiling"

    def _died(self, when: str) -> CompileFailure:
        """The worker ended ``when``: a failure saying how (its signal, its last words).
        Where it died making its topology, or the same way as the worker before it, no
        other is started (:attr:`given_up`): each would die so again, taking its start and
        its death from every check."""
        process = self._process
        code = None
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(timeout=10)
        said = self._last_words()
        self._discard()
        if code is not None and code < 0:
            try:
                how = signal.Signals(-code).name
            except ValueError:
                how = f"signal {-code}"
        else:
            how = f"exit status {code}"
        stage = "start" if "start" in when else "crash"
        tail = f": {said}" if said else ""
        message = f"the libtpu worker died {when} ({how}){tail}"
        death = re.sub(r"\d+", "#", message)
        making = when.startswith("while making")
        if making or death == self._death:
            again = "making its topology" if making else "the same way twice"
            self.given_up = (
                f"{message}; not started again (it died {again}), so this compile and "
                "every later one were not tried"
            )
        self._death = death
        return CompileFailure(message, stage=stage)

    def _last_words(self) -> str:
        """What the worker wrote last that says why it died: libtpu's fatal lines (a failed
        check) where there are any, else its last lines, without logging's prefixes and
        the lines every process writes (JAX's CUDA probe, the core dump's)."""
        stream = self._stderr
        if stream is None:
            return ""
        try:
            stream.seek(0)
            text = stream.read()[-8000:].decode(errors="replace")
        except OSError:
            return ""
        lines = [
            _GLOG_PREFIX.sub("", line).strip()
            for line in text.splitlines()
            if line.strip() and not _NOISE.search(line)
        ]
        fatal = [
            _GLOG_PREFIX.sub("", line).strip() for line in text.splitlines() if _FATAL.match(line)
        ]
        said = list(dict.fromkeys(fatal or lines))  # absl logs a fatal line twice
        return " / ".join(said[-3:])[:600]


_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.-]+:\d+\] (RAW: )?")
"""How libtpu's (absl's) log lines start: ``F1207 16:00:58.544717   17129 target.cc:1737] ``."""
_FATAL = re.compile(r"^F\d{4} ")
"""A fatal log line: what libtpu said as it aborted (``Check failed: ...``)."""
_NOISE = re.compile(
    r"absl::InitializeLog|cudart_stub|Could not find cuda drivers|Dumping core|Raising signal"
)
"""Lines that say nothing of why the worker died."""


# -- the test process's side of a module -------------------------------------------------------


def module_bytes(lowered: Any) -> bytes:
    """A lowered module as the worker reads it (MLIR bytecode, locations kept: the compiled
    program's metadata points at the user's lines as a compile here would)."""
    from jax._src.interpreters import mlir

    data: bytes = mlir.module_to_bytecode(lowered.compiler_ir("stablehlo"))
    return data


def jax_settings() -> dict[str, object]:
    """The values of :data:`SETTINGS` in this process (those this JAX has)."""
    import jax

    found: dict[str, object] = {}
    for name in SETTINGS:
        with contextlib.suppress(AttributeError, KeyError):
            found[name] = jax.config.values[name]
    return found


def prefer_cpu_backend() -> bool:
    """Keep this process's JAX off libtpu where no TPU is attached.

    With libtpu installed (the ``[tpu]`` extra) and ``JAX_PLATFORMS`` unset, JAX loads libtpu
    at its first use to look for a TPU: on a machine without one that takes
    ``/tmp/libtpu_lockfile`` for the process's whole life and finds nothing. Where compiling
    for tpu asks for libtpu, the worker loads it; this process then runs JAX on its CPU
    backend, as it would have anyway, unless the user chose platforms, JAX's backends have
    started, a TPU chip is attached or a GPU driver loads. Returns whether it changed anything.
    """
    import ctypes

    if os.environ.get("JAX_PLATFORMS"):
        return False
    import jax
    from jax._src import config, xla_bridge

    if config.jax_platforms.value or xla_bridge.backends_are_initialized():
        return False
    if tpu_chips_attached():
        return False
    for driver in ("libcuda.so.1", "libamdhip64.so"):
        try:
            ctypes.CDLL(driver)
        except OSError:
            continue
        return False
    jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
    return True


def tpu_chips_attached() -> bool:
    """Whether a TPU chip is attached here (the PCI devices JAX's own check reads; libtpu is
    not loaded)."""
    try:
        from jax._src import hardware_utils
    except ImportError:  # a JAX without the check: assume one may be
        return True
    count = getattr(hardware_utils, "num_available_tpu_chips_and_device_id", None)
    if count is None:
        return True
    try:
        chips, _ = count()
    except Exception:  # unreadable sysfs: assume one may be
        return True
    return bool(chips)
