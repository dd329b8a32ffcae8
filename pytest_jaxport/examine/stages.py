"""The examiner's instrumentation hook: a callback entered around each stage of the one path.

``Examiner(..., stages=timer)`` (and ``fixture.Jaxport(..., stages=timer)``, which passes it
on) enters ``timer(name)`` around every stage it runs, with these names:

- ``trace``: tracing the checked function (a check only);
- ``lowered cache``: the lowered cache's keys and entries, read before lowering;
- ``lower:<platform>``: lowering for one platform and reading its program;
  ``lower:<p1>+<p2>+...``: the absent platforms lowered together in one lowering;
- ``execute:<platform>``: compiling and running on a platform present (a check only);
- ``partition``: compiling for the SPMD partitioner's collectives (a partitioned program);
- ``census:<platform>``: the platform's census and formats findings;
- ``compile:<platform>``: the compiled level (where ``compile`` asks);
- ``share:<platform>``: the runtime share, measured or estimated;
- ``emulate:<platform>``: a check run on the CPU as an absent platform computes;
- ``compare``: the outputs compared (a check only).

:class:`StageTimer` is the ready-made observer: wall and CPU seconds per stage
(``benchmarks/overhead/inprocess.py`` times a check with it).

>>> timer = StageTimer()
>>> with timer("trace"):
...     pass
>>> list(timer.wall)
['trace']

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field

Stages = Callable[[str], AbstractContextManager[object]]
"""``stages(name)``: a context manager the examiner enters around the stage ``name``."""

TRACE = "trace"
LOWERED_CACHE = "lowered cache"
PARTITION = "partition"
COMPARE = "compare"


def lower_stage(*platforms: str) -> str:
    """``lower:cpu``; ``lower:cuda+rocm+tpu`` for platforms lowered together."""
    return "lower:" + "+".join(platforms)


def execute_stage(platform: str) -> str:
    """``execute:cpu``: compiling and running on a platform present."""
    return f"execute:{platform}"


def census_stage(platform: str) -> str:
    """``census:tpu``: the platform's census and formats findings."""
    return f"census:{platform}"


def compile_stage(platform: str) -> str:
    """``compile:cuda``: the platform's compiled level."""
    return f"compile:{platform}"


def share_stage(platform: str) -> str:
    """``share:cpu``: the platform's runtime share."""
    return f"share:{platform}"


def emulate_stage(platform: str) -> str:
    """``emulate:tpu``: a check run on the CPU as the platform computes."""
    return f"emulate:{platform}"


def unobserved(name: str) -> AbstractContextManager[object]:
    """The hook when nobody observes: enters and leaves, nothing else."""
    return nullcontext()


@dataclass(slots=True)
class StageTimer:
    """Wall and process CPU seconds of each stage, every time it ran, in order of first run."""

    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        cpu = time.process_time()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.wall.setdefault(name, []).append(time.perf_counter() - start)
            self.cpu.setdefault(name, []).append(time.process_time() - cpu)

    def totals(self) -> dict[str, float]:
        """Wall seconds per stage, summed over its runs."""
        return {name: sum(seconds) for name, seconds in self.wall.items()}
