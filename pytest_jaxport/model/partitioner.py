"""Collectives the SPMD partitioner inserts, read from XLA's record of partitioning.

A ``jax.jit`` over a ``Mesh`` with ``NamedSharding`` inputs (data-parallel training: the
gradient all-reduce) lowers to StableHLO with sharding annotations and no collective: XLA's
SPMD partitioner (GSPMD, or Shardy's pipeline before it) adds them when it compiles the
program, one per op whose operands or results need data from other devices. Those are NCCL
calls on cuda as much as a ``psum`` is.

Partitioning does not depend on the backend (it rewrites the sharded program before any
backend-specific pass), so the program is partitioned where it compiles anyway: the platform
present here (CPU host devices with ``--xla_force_host_platform_device_count``), with XLA
asked to dump the module before optimizations and right after the ``spmd-partitioning``
pass (:data:`DUMP_OPTIONS`). The collectives of the partitioned module that the module as
lowered does not have are the inserted ones (:func:`inserted_collectives`); XLA gives each
the metadata of the op that needed it, so each points at that op's source line. Releases
before stack frames in HLO metadata (jax 0.6) record only that op's innermost frame outside
JAX (a layer inside flax, say); :func:`with_inserted` then takes the whole call stack from the
lowered program's ops at that frame when one call stack reaches it, so the site is shown where
the user's code called it, and otherwise keeps the frame (a library's line, which reports
show at the line that called the computation).
:func:`with_inserted` adds them to a lowered :class:`~census.Program` as ``spmd.<op>`` sites,
which the classification table counts like the program's own collectives (nccl on cuda,
rccl on rocm, ICI on tpu).

What a backend runs can differ: XLA's GPU pipeline combines small all-reduces into one
(``compile = ["cuda"]`` shows that), and its collective optimisations may turn an
all-reduce and a slice into a reduce-scatter. The lowered level counts what the partitioner
asked for, op by op, like it counts every ``dot_general`` as a cuBLAS call.

Pure: reads files, never imports JAX.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pytest_jaxport.model.census import CALL_OPS, OpSite, Program, location_frames
from pytest_jaxport.model.classification import INSERTED_PREFIX, collective_kind
from pytest_jaxport.model.hlo import parse_compiled_hlo

PASS = "spmd-partitioning"
"""The HLO pass that partitions a sharded module (the same name under GSPMD and Shardy)."""

PARTITIONER_FUNCTION = "<spmd-partitioner>"
"""The function :func:`with_inserted` adds for the inserted collectives (not a valid
StableHLO symbol, so it never meets a function of the module)."""


def dump_options(directory: Path) -> dict[str, object]:
    """XLA compile options that dump the module into ``directory`` as lowered
    (``*before_optimizations.txt``) and as partitioned (``*after_spmd-partitioning*``)."""
    return {"xla_dump_to": str(directory), "xla_dump_hlo_pass_re": PASS}


def inserted_collectives(directory: Path) -> tuple[OpSite, ...]:
    """The collectives partitioning added to the module dumped in ``directory``, as
    ``spmd.<op>`` sites (``spmd.all_reduce``) with a count and the location of the op that
    needed each.

    Raises ``ValueError`` unless the dump holds one partitioned module and that module as
    lowered (XLA partitions only a program over several devices, and records nothing for an
    executable it did not compile).
    """
    found = sorted(directory.glob(f"*after_{PASS}*.txt"))
    if len(found) != 1:
        raise ValueError(f"{directory}: {len(found)} records of a partitioned module")
    module = found[0].name.split(".")[0]  # module_0002: other modules (autotuning) differ
    before = sorted(directory.glob(f"{module}.*before_optimizations.txt"))
    if len(before) != 1:
        raise ValueError(f"{directory}: {len(before)} records of {module} as lowered")
    added = _collectives(_read(found[0])) - _collectives(_read(before[0]))
    ordered = sorted(added.items(), key=lambda item: (item[0][0], str(item[0][1])))
    return tuple(
        OpSite(op=INSERTED_PREFIX + op.partition(".")[2], location=location, count=n)
        for (op, location), n in ordered
    )


def with_inserted(program: Program, inserted: Sequence[OpSite]) -> Program:
    """``program`` with ``inserted`` collectives in :data:`PARTITIONER_FUNCTION`, which its
    entry calls once; ``program`` itself when there are none (or it has them already)."""
    if not inserted or PARTITIONER_FUNCTION in program.functions:
        return program
    functions = dict(program.functions)
    functions[PARTITIONER_FUNCTION] = _with_call_stacks(inserted, program)
    call = OpSite(op="func.call", target=PARTITIONER_FUNCTION)
    functions[program.entry] = (*functions.get(program.entry, ()), call)
    return replace(program, functions=functions)


def _with_call_stacks(inserted: Sequence[OpSite], program: Program) -> tuple[OpSite, ...]:
    """``inserted`` with each one-frame location (HLO metadata without stack frames) replaced
    by the call stack of the lowered program's ops at that frame, when they share one (only
    calls and ops that can be kernels keep a location, so elementwise ops' frames stay).

    >>> lowered = Program(entry="main", functions={"main": (OpSite(op="stablehlo.dot_general",
    ...     location='loc(callsite("f"("/l/dense.py":9:4) at "g"("/u/m.py":3:1)))'),)})
    >>> (site,) = _with_call_stacks([OpSite(op="spmd.all_reduce",
    ...     location='loc("/l/dense.py":9:0)')], lowered)
    >>> site.location
    'loc(callsite("f"("/l/dense.py":9:4) at "g"("/u/m.py":3:1)))'
    """
    stacks: dict[tuple[str, str], set[str]] = {}
    for sites in program.functions.values():
        for site in sites:
            if site.location and "callsite(" in site.location:
                frames = location_frames(site.location)
                if frames:
                    stacks.setdefault(frames[0], set()).add(site.location)
    resolved = []
    for site in inserted:
        frames = location_frames(site.location or "")
        # A frame reached along several call stacks (one layer used twice) stays as it is:
        # the metadata does not say which caller needed the collective.
        if len(frames) == 1 and len(stacks.get(frames[0], ())) == 1:
            (stack,) = stacks[frames[0]]
            site = replace(site, location=stack)
        resolved.append(site)
    return tuple(resolved)


def partition_record(inserted: Sequence[OpSite]) -> Program:
    """``inserted`` as a :class:`~census.Program`, the form the lowered cache keeps."""
    return Program(entry=PARTITIONER_FUNCTION, functions={PARTITIONER_FUNCTION: tuple(inserted)})


def recorded_inserted(record: Program) -> tuple[OpSite, ...]:
    """The inserted collectives :func:`partition_record` kept."""
    return tuple(record.functions.get(PARTITIONER_FUNCTION, ()))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _collectives(text: str) -> Counter[tuple[str, str | None]]:
    """Call-weighted collectives of an HLO module by ``(op, location)``."""
    program = parse_compiled_hlo(text)
    weights: dict[str, Counter[tuple[str, str | None]]] = {}

    def weigh(name: str, active: frozenset[str]) -> Counter[tuple[str, str | None]]:
        if name in weights:
            return weights[name]
        counts: Counter[tuple[str, str | None]] = Counter()
        for site in program.functions.get(name, ()):
            if site.op in CALL_OPS and site.target is not None:
                if site.target not in active:
                    inner = weigh(site.target, active | {site.target})
                    counts.update({key: n * site.count for key, n in inner.items()})
            elif collective_kind(site.op) is not None:
                counts[(site.op, site.location)] += site.count
        weights[name] = counts
        return counts

    return weigh(program.entry, frozenset({program.entry}))
