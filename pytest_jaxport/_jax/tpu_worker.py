"""The TPU compile worker: a process of its own that loads libtpu and compiles lowered
modules for TPU topologies without a TPU, one request at a time.

:class:`pytest_jaxport._jax.libtpu.TpuCompiler` starts it (``python -c <boot> <this file>``,
with ``JAX_PLATFORMS=cpu`` and ``ALLOW_MULTIPLE_LIBTPU_LOAD=1``) and is the only thing that
talks to it. It stands apart from the test process so that what libtpu does to a process
stays out of the user's: its machine-wide lockfile, its lines on file descriptor 2, a
segmentation fault of a mismatched jax/libtpu pair, a compile that runs for minutes (the
test process kills the worker at its time limit and starts another).

It imports only the standard library and JAX (no ``pytest_jaxport`` module: it is run by its
path, so it never depends on how the test process found the package).

The protocol, over its standard input and a private copy of its standard output (anything
else written to standard output, by C code or a stray print, goes to standard error):

- once started, one line: ``{"ready": true, "jax": ..., "libtpu": ...}`` or ``{"ready":
  false, "error": ...}``;
- each request is one JSON line ``{"topology": "v5e:2x2", "host_bounds": [2, 2, 1],
  "partitions": 4, "options": {...}, "settings": {...}, "size": N}`` followed by the ``N``
  bytes of the module (MLIR bytecode, as ``jax.stages.Lowered.compiler_ir("stablehlo")``
  serializes);
- each reply is one JSON line: ``{"ok": true, "hlo": <optimized HLO text>, "memory": {...},
  "device_kind": ..., "seconds": ...}`` (``memory``: ``get_compiled_memory_stats()``'s
  sizes, ``peak_memory_in_bytes`` among them where the installed jaxlib has it) or ``{"ok":
  false, "error": ..., "stage": "topology" | "compile"}``; where the request's topology is
  made first (libtpu loads then), led by ``{"phase": "topology"}``, then, once it is made,
  ``{"phase": "warm"}`` (libtpu's compiler starts on a module of the worker's own) and
  ``{"phase": "compile"}``: a worker that dies before ``warm`` died making the topology, and
  would die so for every module. Only what follows ``{"phase": "compile"}`` (or the request,
  where its topology was made before) is the module's compile, the time
  ``compile_time_limit`` bounds: a fresh worker's start is not the program's.

The worker exits when its standard input closes (the test process ended).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
)


def _reply(channel: IO[bytes], message: dict[str, Any]) -> None:
    channel.write(json.dumps(message).encode() + b"\n")
    channel.flush()


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


WARM_MODULE = """module @jit_warm {
  func.func public @main(%arg0: tensor<8x128xf32>) -> (tensor<8x128xf32>) {
    %0 = stablehlo.add %arg0, %arg0 : tensor<8x128xf32>
    return %0 : tensor<8x128xf32>
  }
}
"""
"""The module a fresh topology's compiler warms up on (:meth:`_Compiler._warm`)."""


class _Compiler:
    """Topologies by name, made once each, and the compile of one module for one."""

    def __init__(self) -> None:
        import jax  # the worker's purpose: only it loads libtpu
        from jax._src import compiler
        from jax._src.interpreters import mlir
        from jax._src.lib import xla_client  # type: ignore[attr-defined]
        from jax._src.lib.mlir import ir  # type: ignore[attr-defined]
        from jax.experimental import topologies

        self._jax = jax
        self._compiler = compiler
        self._mlir = mlir
        self._xla_client = xla_client
        self._ir = ir
        self._topologies = topologies
        self._made: dict[tuple[str, tuple[int, ...]], Any] = {}
        self._warmed: set[Any] = set()

    def devices(self, name: str, host_bounds: tuple[int, ...]) -> list[Any]:
        key = (name, host_bounds)
        if key not in self._made:
            topology = self._topologies.get_topology_desc(
                platform="tpu",
                topology_name=name,
                chip_config_name="default",
                chips_per_host_bounds=host_bounds,
                num_slices=1,
                wrap=(False, False, False),
            )
            self._made[key] = sorted(topology.devices, key=lambda device: device.id)
        devices: list[Any] = self._made[key]
        return devices

    def _warm(self, device: Any) -> None:
        """Compile :data:`WARM_MODULE` for ``device``, once per device: libtpu's compiler
        starts on its first module (most of a second, several under load), which is the
        worker's start, not the time of the first program it is asked for. Its failure is
        the program's to say."""
        import numpy as np

        if device in self._warmed:
            return
        self._warmed.add(device)
        try:
            options = self._compiler.get_compile_options(
                num_replicas=1,
                num_partitions=1,
                device_assignment=np.array([device], dtype=object).reshape(1, 1),
            )
            with self._mlir.make_ir_context():
                parsed = self._ir.Module.parse(WARM_MODULE)
                self._compile_unloaded([device], parsed, WARM_MODULE.encode(), options)
        except Exception:  # the module asked for compiles next, and says why it cannot
            return

    def knows(self, request: dict[str, Any]) -> bool:
        """Whether the request's topology is made already (libtpu loaded for it)."""
        return (str(request["topology"]), tuple(request["host_bounds"])) in self._made

    def settle(self, settings: dict[str, Any]) -> None:
        """The test process's JAX settings that decide how a module compiles (the
        partitioner it was lowered for), where this JAX has them."""
        for name, value in settings.items():
            try:
                self._jax.config.update(name, value)  # type: ignore[no-untyped-call]
            except Exception:  # a setting this JAX does not know changes nothing here
                continue

    def compile(
        self, request: dict[str, Any], module: bytes, phase: Callable[[str], None]
    ) -> dict[str, Any]:
        """The reply to ``request``; ``phase("warm")`` once its topology is made,
        ``phase("compile")`` once libtpu's compiler has started for it."""
        import numpy as np

        partitions = int(request["partitions"])
        try:
            devices = self.devices(str(request["topology"]), tuple(request["host_bounds"]))
        except Exception as error:  # the topology is the configuration's: say it so
            return {"ok": False, "stage": "topology", "error": _error(error)}
        phase("warm")
        self._warm(devices[0])
        phase("compile")
        if partitions > len(devices):
            return {
                "ok": False,
                "stage": "topology",
                "error": f"the program is partitioned over {partitions} devices, and "
                f"{request['topology']} has {len(devices)}",
            }
        chosen = devices[:partitions]
        self.settle(dict(request.get("settings", {})))
        started = time.perf_counter()
        try:
            options = self._compiler.get_compile_options(
                num_replicas=1,
                num_partitions=partitions,
                device_assignment=np.array(chosen, dtype=object).reshape(1, partitions),
                env_options_overrides=dict(request.get("options", {})) or None,
            )
            with self._mlir.make_ir_context():
                parsed = self._ir.Module.parse(module)
                executable = self._compile_unloaded(chosen, parsed, module, options)
            text = executable.hlo_modules()[0].to_string()
        except Exception as error:  # the compiler's refusal: the finding
            return {"ok": False, "stage": "compile", "error": _error(error)}
        seconds = time.perf_counter() - started
        try:
            stats = executable.get_compiled_memory_stats()
            memory: dict[str, int] | None = {
                name: int(getattr(stats, name)) for name in MEMORY_FIELDS
            }
            peak = getattr(stats, "peak_memory_in_bytes", None)  # jaxlib 0.7 and later
            if memory is not None and isinstance(peak, int):
                memory["peak_memory_in_bytes"] = peak
        except Exception:  # an older PJRT API without the stats: the HLO still counts
            memory = None
        return {
            "ok": True,
            "hlo": text,
            "memory": memory,
            "device_kind": str(chosen[0].device_kind),
            "seconds": seconds,
        }

    def _compile_unloaded(
        self, devices: list[Any], parsed: Any, module: bytes, options: Any
    ) -> Any:
        """The compile-only client's executable: of the parsed module (jax 0.7 and later),
        or of its bytes (jax 0.6 takes serialized StableHLO only)."""
        client = devices[0].client
        device_list = self._xla_client.DeviceList(tuple(devices))
        try:
            return client.compile(parsed, executable_devices=device_list, compile_options=options)
        except TypeError:
            return client.compile(module, executable_devices=device_list, compile_options=options)


def _libtpu_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("libtpu")
    except PackageNotFoundError:
        return ""


def _no_core_files() -> None:
    """A worker libtpu aborts (a check that fails in C++) leaves no core file in the user's
    folder, nor spends seconds writing one: its last words say why it died."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to limit
        return
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        return


def serve() -> None:
    """Answer the test process's compile requests, one at a time, until its standard input
    closes (the protocol above)."""
    _no_core_files()
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray output (libtpu's C code, a print) goes to standard error
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    try:
        compiler = _Compiler()
        import jax

        _reply(channel, {"ready": True, "jax": jax.__version__, "libtpu": _libtpu_version()})
    except BaseException as error:  # the test process says it in its own words
        _reply(channel, {"ready": False, "error": _error(error)})
        return
    while True:
        header = requests.readline()
        if not header:
            return
        request = json.loads(header)
        module = requests.read(int(request["size"]))
        fresh = not compiler.knows(request)

        def phase(name: str, fresh: bool = fresh) -> None:
            if fresh:  # a topology made before is neither made nor warmed again
                _reply(channel, {"phase": name})

        phase("topology")
        try:
            answer = compiler.compile(request, module, phase)
        except BaseException as error:  # never die on a request: the caller reads the reply
            answer = {"ok": False, "stage": "compile", "error": _error(error)}
        _reply(channel, answer)


if __name__ == "__main__":
    serve()
