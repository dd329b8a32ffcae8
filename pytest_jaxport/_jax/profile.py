"""Measured runtime per compiled instruction, from an in-memory profiler session.

A file-free profiler session around a few runs, after a warm-up, gives each instruction's
self time; ``while`` events contain the events of their bodies on the same line, so nested
time is subtracted from the parent (never counted twice). The profilers name the instruction
an event executed (its name in the compiled module: ``eigh.0``, ``ynn_fusion.2``,
``custom-call.8``...) in one of two ways (:func:`instruction_of`):

- an ``hlo_op`` stat: XLA:CPU's thunks and XLA:GPU's kernels (jaxlib 0.8.3 and newer);
- the TPU's device trace (``/device:TPU:0``): its ``XLA Ops`` line has one event per
  instruction, named by the instruction's HLO text (``%custom-call.8 = (f32[64,64]...)
  custom-call(...), custom_call_target="LuDecompositionBlock"``), without an ``hlo_op``
  stat. Its ``Async XLA Ops`` line holds asynchronous copies from their start to their done
  (with an ``hlo_op`` stat): they overlap the instructions that run meanwhile, and the copy's
  own start and done are events of ``XLA Ops``, so that line is left out. Seen on a TPU v5e
  (jax 0.10.2, libtpu 0.0.42.1; ``benchmarks/results/tpu-v5e-traces/``).

JAX is reached only inside functions, through :mod:`pytest_jaxport._jax.adapters` (the
profiler's private API, and reading its events safely on every supported release).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pytest_jaxport._jax.adapters import (
    profile_data,
    profiler_names_instructions,
    profiler_session,
    quiet_type_construction,
)

OPS_LINE = "XLA Ops"
"""The TPU device trace's line of instructions, each event named by its HLO text."""
ASYNC_OPS_LINE = "Async XLA Ops"
"""The TPU device trace's line of asynchronous copies, start to done (left out: overlaps)."""

_INSTRUCTION_TEXT = re.compile(r"%?([\w.\-]+) = ")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One profiler event that executed an HLO instruction."""

    op: str
    start_ns: float
    end_ns: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfilerTrace:
    """What one profiler session recorded, as the runtime share reads it: per plane
    (``/host:CPU``, ``/device:TPU:0``), its lines of events that executed an instruction,
    and how many events the plane recorded in all."""

    planes: Mapping[str, tuple[tuple[Event, ...], ...]]
    recorded: Mapping[str, int]

    def lines(self) -> list[tuple[Event, ...]]:
        """Every line of instruction events, over all planes."""
        return [line for lines in self.planes.values() for line in lines]


def instruction_of(line: str, name: str, stats: Mapping[str, object]) -> str | None:
    """The instruction an event on ``line`` named ``name`` executed, or ``None``.

    >>> instruction_of("tf_XLAEigen/12", "eigh.0", {"hlo_op": "eigh.0"})
    'eigh.0'
    >>> instruction_of("XLA Ops", '%custom-call.8 = (f32[64,64]) custom-call(f32[64,64] %a)', {})
    'custom-call.8'
    >>> instruction_of("Async XLA Ops", "%copy-start = (f32[8]) copy-start(...)",
    ...                {"hlo_op": "copy-done"}) is None
    True
    >>> instruction_of("XLA Modules", "jit_solve(1066874364)", {}) is None
    True
    """
    if line == ASYNC_OPS_LINE:
        return None
    op = stats.get("hlo_op")
    if isinstance(op, str):
        return op
    if line == OPS_LINE:
        found = _INSTRUCTION_TEXT.match(name)
        return found.group(1) if found else None
    return None


def unattributed(recorded: Mapping[str, int], *, names_instructions: bool = True) -> str:
    """Why a profiler session measured nothing, in a report's words: it recorded no event,
    or events none of which names an instruction of the program (``recorded``: events per
    plane); ``names_instructions``: whether this jaxlib's profilers name them at all.

    >>> print(unattributed({"/host:CPU": 54, "/device:TPU:0": 0}))  # doctest: +NORMALIZE_WHITESPACE
    the JAX profiler recorded the run (54 events on /host:CPU) but no event names an
    instruction of the program (no hlo_op stat, no XLA Ops line): its time cannot be attributed
    >>> unattributed({})
    'the JAX profiler recorded no event while the program ran (another profiler session active?)'
    """
    seen = {plane: n for plane, n in recorded.items() if n}
    if not seen:
        return (
            "the JAX profiler recorded no event while the program ran (another profiler "
            "session active?)"
        )
    where = ", ".join(f"{n} events on {plane}" for plane, n in seen.items())
    why = (
        f"the JAX profiler recorded the run ({where}) but no event names an instruction of "
        f"the program (no hlo_op stat, no {OPS_LINE} line): its time cannot be attributed"
    )
    if not names_instructions:
        why += " (this jaxlib's profiler names instructions from jaxlib 0.8.3)"
    return why


def read_trace(xspace: bytes) -> ProfilerTrace:
    """The instruction events of a serialized XSpace, per plane and line (ordered by start)."""
    data = profile_data(xspace)
    planes: dict[str, tuple[tuple[Event, ...], ...]] = {}
    recorded: dict[str, int] = {}
    with quiet_type_construction():  # event.stats builds a nanobind type on first use
        for plane in data.planes:
            lines = []
            count = 0
            for line in plane.lines:
                events = []
                for event in line.events:
                    count += 1
                    op = instruction_of(line.name, event.name, dict(event.stats))
                    if op is not None:
                        events.append(Event(op=op, start_ns=event.start_ns, end_ns=event.end_ns))
                if events:
                    lines.append(tuple(sorted(events, key=lambda e: e.start_ns)))
            recorded[plane.name] = recorded.get(plane.name, 0) + count
            if lines:
                planes[plane.name] = (*planes.get(plane.name, ()), *lines)
    return ProfilerTrace(planes=planes, recorded=recorded)


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


def seconds_per_run(lines: Iterable[Iterable[Event]], runs: int) -> dict[str, float]:
    """Mean self time in seconds per run of each instruction that took time."""
    return {op: ns / 1e9 / runs for op, ns in self_times(lines).items() if ns > 0}


def profile(run: Callable[[], object], *, runs: int = 3, warmup: int = 1) -> ProfilerTrace:
    """The trace of ``runs`` calls of ``run`` after ``warmup`` calls outside the session."""
    for _ in range(warmup):
        run()
    session = profiler_session(host_tracer_level=1)  # records every instruction at ~0 overhead
    try:
        for _ in range(runs):
            run()
    finally:
        xspace = session.stop()
    return read_trace(xspace)


def measure(run: Callable[[], object], *, runs: int = 3, warmup: int = 1) -> dict[str, float]:
    """Mean self time in seconds per compiled instruction over ``runs`` calls of ``run``.

    ``run`` must execute the compiled program and block until its outputs are ready.
    Raises ``RuntimeError`` saying what the profiler recorded when no event names an
    instruction (:func:`unattributed`), or when the profiler is unavailable (another
    session is active).
    """
    trace = profile(run, runs=runs, warmup=warmup)
    lines = trace.lines()
    if not lines:
        raise RuntimeError(
            unattributed(trace.recorded, names_instructions=profiler_names_instructions())
        )
    return seconds_per_run(lines, runs)
