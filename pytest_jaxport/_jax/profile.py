"""Measured runtime per compiled instruction, from an in-memory profiler session.

The JAX profiler tags every thunk it runs with the ``hlo_op`` it executes (the instruction
name in the compiled module: ``eigh.0``, ``ynn_fusion.2``, ``multiply_tanh_fusion``...).
A file-free profiler session around a few runs, after a warm-up, gives each instruction's
self time; ``while`` thunks contain the events of their bodies on the same thread, so nested
time is subtracted from the parent (never counted twice).

JAX is reached only inside functions, through :mod:`pytest_jaxport._jax.adapters` (the
profiler's private API, and reading its events safely on every supported release).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pytest_jaxport._jax.adapters import profile_data, profiler_session, quiet_type_construction


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One profiler event that executed an HLO instruction."""

    op: str
    start_ns: float
    end_ns: float


def self_times(lines: Iterable[Iterable[Event]]) -> dict[str, float]:
    """Self time per instruction, summed over lines (threads); nested events are subtracted.

    Events on a line are ordered by start time, as the profiler records them.

    >>> self_times([[Event(op="while.1", start_ns=0, end_ns=10),
    ...              Event(op="dot.2", start_ns=2, end_ns=6)]])
    {'while.1': 6.0, 'dot.2': 4.0}
    """
    totals: dict[str, float] = {}
    for line in lines:
        stack: list[tuple[float, str]] = []
        for event in line:
            while stack and stack[-1][0] <= event.start_ns:
                stack.pop()
            duration = event.end_ns - event.start_ns
            if stack:
                totals[stack[-1][1]] = totals.get(stack[-1][1], 0.0) - duration
            totals[event.op] = totals.get(event.op, 0.0) + duration
            stack.append((event.end_ns, event.op))
    return {op: float(ns) for op, ns in totals.items()}


def measure(run: Callable[[], object], *, runs: int = 3, warmup: int = 1) -> dict[str, float]:
    """Mean self time in seconds per compiled instruction over ``runs`` calls of ``run``.

    ``run`` must execute the compiled program and block until its outputs are ready.
    Raises ``RuntimeError`` when the profiler is unavailable (e.g. another session is active).
    """

    for _ in range(warmup):
        run()
    session = profiler_session(host_tracer_level=1)  # records every hlo_op event at ~0 overhead
    try:
        for _ in range(runs):
            run()
    finally:
        xspace = session.stop()
    data = profile_data(xspace)
    lines = []
    with quiet_type_construction():  # event.stats builds a nanobind type on first use
        for plane in data.planes:
            for line in plane.lines:
                events = []
                for event in line.events:
                    op = dict(event.stats).get("hlo_op")
                    if isinstance(op, str):
                        events.append(Event(op=op, start_ns=event.start_ns, end_ns=event.end_ns))
                if events:
                    lines.append(events)
    if not lines:
        raise RuntimeError("the JAX profiler recorded no hlo_op events (jaxlib>=0.8.3 needed)")
    return {op: ns / 1e9 / runs for op, ns in self_times(lines).items() if ns > 0}
