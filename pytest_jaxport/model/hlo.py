"""Read post-optimization HLO text (``compiled.as_text()``) into a census :class:`Program`.

This is the compiled level's counterpart of reading StableHLO: one :class:`~census.OpSite`
per dispatch XLA will make, so :func:`census.take_census` can classify compiled programs
with the same call weighting and source attribution as lowered ones. Pure: no jax import.
The text is read by :mod:`pytest_jaxport.model.hlo_text`; what each dispatch computes and
moves is :mod:`pytest_jaxport.model.hlo_cost`'s, the relayouts around a library call
:mod:`pytest_jaxport.model.hlo_relayouts`'.

How HLO maps onto op sites:

- every instruction becomes ``op="hlo.<opcode>"`` with ``-`` spelled ``_`` (``hlo.fft``,
  ``hlo.all_reduce``, ``hlo.custom_call``), matching ``stablehlo.*`` spelling so the census's
  custom-call convention (an op ending in ``custom_call`` carries its target) holds;
- a custom call carries its ``custom_call_target`` as ``target``;
- a fusion is one kernel: ``op="hlo.fusion:<kind>"`` where ``<kind>`` is the backend kind
  XLA chose (``__triton_nested_gemm_fusion``, ``__cudnn$fusion``, ``__ynn_fusion``,
  ``__custom_fusion$<name>``...) or else XLA's own fusion kind (``kLoop``, ``kInput``...).
  Its fused computation is never walked. A ``dynamic_slice_fusion`` that wraps a library
  call is the library call (that is what runs), so it yields the wrapped custom call;
- ``while``, ``conditional``, ``call`` and ``async-start`` yield a ``call`` op site per
  computation they run, which the census walks and weights (while bodies count once:
  trip counts are a runtime matter); the loop or branch itself is one ``hlo.while`` /
  ``hlo.conditional`` op;
- the second half of an async pair (``*-done``, ``*-update``) is not a second dispatch,
  and ``*-start`` is named after the op it starts (``all-reduce-start`` is
  ``hlo.all_reduce``); values that cost nothing (``parameter``, ``constant``,
  ``get-tuple-element``, ``tuple``, ``bitcast``...) are left out;
- ``location`` is the instruction's ``metadata`` source position rendered as MLIR location
  text, ``loc(callsite("f"("model.py":12:4) at ...))``, innermost frame first, so that
  :func:`census.parse_location` finds the user's line;
- a library call (cuDNN, cuBLAS, oneDNN, a fusion around a dot or convolution) carries the
  transposes and copies XLA's layout assignment put around it as ``attributes``:
  ``relayouts`` (how many feed or read it), ``relayout_kernels`` (how many of those are
  kernels of their own rather than fused into a neighbour) and ``relayout_bytes`` (what
  they write).

Example::

    >>> program = parse_compiled_hlo('''HloModule m
    ... ENTRY %main (a: c64[8]) -> c64[8] {
    ...   %a = c64[8]{0} parameter(0)
    ...   ROOT %f = c64[8]{0} fft(%a), fft_type=FFT, metadata={source_file="m.py" source_line=3}
    ... }''')
    >>> [(site.op, site.location, site.flops) for site in program.functions[program.entry]]
    [('hlo.fft', 'loc("m.py":3:0)', 120.0)]

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace

from pytest_jaxport.model.census import OpSite, Program
from pytest_jaxport.model.hlo_cost import FREE_OPCODES, dispatch_cost
from pytest_jaxport.model.hlo_relayouts import relayouts_around
from pytest_jaxport.model.hlo_text import (
    HloInstruction,
    HloModule,
    computation_refs,
    instruction_scope,
    instruction_users,
    metadata_location,
    operand_shape,
    parse_hlo_module,
    unquote,
)

CALL_OP = "call"
"""The op name :mod:`census` follows into another computation (one of ``census.CALL_OPS``)."""

FUSION_OP = "hlo.fusion"
CUSTOM_CALL_OP = "hlo.custom_call"

_DYNAMIC_SLICE_FUSIONS = frozenset(
    {"dynamic_slice_fusion", "address_computation", "dynamic_address_computation"}
)
"""Custom fusions that only compute addresses for the library call (or copy) they wrap."""

_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def parse_compiled_hlo(text: str) -> Program:
    """The dispatches of one compiled HLO module, per computation the program runs.

    ``text`` is ``jax.jit(f).lower(...).compile().as_text()`` (any backend). Where the
    compiler tiled the arrays (TPU), each dispatch keeps its operands' and results' shapes
    with their layouts, and the program its ``entry_computation_layout`` (what layout
    findings read: :mod:`pytest_jaxport.model.format_census`); the compile path adds what the
    compiler counted of its memory (``Program.memory``). Raises ``ValueError`` when the text
    has no ``ENTRY`` computation.
    """
    module = parse_hlo_module(text)
    functions: dict[str, tuple[OpSite, ...]] = {}
    pending = [module.entry]
    while pending:
        name = pending.pop()
        if name in functions:
            continue
        sites = tuple(_sites(module, module.computations.get(name, ())))
        functions[name] = sites
        pending.extend(
            site.target
            for site in sites
            if site.op == CALL_OP and site.target is not None and site.target not in functions
        )
    layout = module.entry_layout if _TILED in module.entry_layout else ""
    return Program(entry=module.entry, functions=functions, entry_layout=layout)


def instruction_sites(text: str) -> dict[str, OpSite]:
    """Each dispatching instruction's op site, by instruction name (``eigh.0``, ``ynn_fusion``).

    The profiler names the instructions it runs this way (its ``hlo_op`` stat), so this maps
    measured time back to what ran. Loops, calls and branches map to their own op, not to
    the computations they run (those instructions are listed under their own names). The
    sites carry no locations: a share is per layer and library, never per line.
    """
    module = parse_hlo_module(text, frames=False)
    sites: dict[str, OpSite] = {}
    for instructions in module.computations.values():
        scope = instruction_scope(instructions)
        for instruction in instructions:
            for site in _instruction_sites(module, instruction, scope, detail=False):
                if site.op != CALL_OP:
                    sites.setdefault(instruction.name, site)
                    break
    return sites


def _sites(module: HloModule, instructions: tuple[HloInstruction, ...]) -> Iterator[OpSite]:
    scope = instruction_scope(instructions)
    users = instruction_users(instructions)
    claimed: set[str] = set()
    for instruction in instructions:
        relayouts = relayouts_around(module, instruction, scope, users, claimed)
        for site in _instruction_sites(module, instruction, scope):
            yield replace(site, attributes=relayouts) if relayouts and site.op != CALL_OP else site


def _instruction_sites(
    module: HloModule,
    instruction: HloInstruction,
    scope: Mapping[str, HloInstruction],
    *,
    detail: bool = True,
) -> Iterator[OpSite]:
    """The op sites of one instruction; without ``detail``, no locations and no costs (what
    the measured share needs: only what ran)."""
    opcode = instruction.opcode
    attributes = instruction.attributes
    if opcode in FREE_OPCODES or opcode.endswith(("-done", "-update")):
        return
    location = metadata_location(module, attributes.get("metadata")) if detail else None
    if opcode == "async-start":
        for callee in computation_refs(attributes.get("calls")):
            yield OpSite(op=CALL_OP, target=callee, location=location)
        return
    if opcode == "call":
        for callee in computation_refs(attributes.get("to_apply")):
            yield OpSite(op=CALL_OP, target=callee, location=location)
        return
    if opcode == "while":
        yield OpSite(op="hlo.while", location=location)
        trips = _trip_count(attributes)
        for key, runs in (("condition", trips + 1), ("body", trips)):
            for callee in computation_refs(attributes.get(key)):
                yield OpSite(op=CALL_OP, target=callee, location=location, runs=max(runs, 1))
        return
    if opcode == "conditional":
        yield OpSite(op="hlo.conditional", location=location)
        keys = ("branch_computations", "true_computation", "false_computation")
        for key in keys:
            for callee in computation_refs(attributes.get(key)):
                yield OpSite(op=CALL_OP, target=callee, location=location)
        return
    if opcode == "fusion":
        yield from _fusion_sites(module, instruction, scope, location, detail=detail)
        return
    flops, moved = dispatch_cost(module, instruction, scope) if detail else (0.0, 0.0)
    operands, results = _tiled_types(instruction, scope) if detail else ((), ())
    if opcode == "custom-call":
        target = unquote(attributes.get("custom_call_target", '""'))
        yield OpSite(op=CUSTOM_CALL_OP, target=target, location=location, flops=flops,
                     bytes=moved, operand_types=operands, result_types=results)  # fmt: skip
        return
    if opcode.endswith("-start"):
        opcode = opcode.removesuffix("-start")
    yield OpSite(op=_op_name(opcode), location=location, flops=flops, bytes=moved,
                 operand_types=operands, result_types=results)  # fmt: skip


def _fusion_sites(
    module: HloModule,
    instruction: HloInstruction,
    scope: Mapping[str, HloInstruction],
    location: str | None,
    *,
    detail: bool,
) -> Iterator[OpSite]:
    kind = _fusion_kind(instruction.attributes)
    name = kind.removeprefix("__custom_fusion$")
    if name != kind and name in _DYNAMIC_SLICE_FUSIONS:
        # The fusion computes buffer offsets and hands them to the wrapped op: when that
        # op is a library call, the library call is the dispatch.
        fused = [
            (inner, instruction_scope(computation))
            for callee in computation_refs(instruction.attributes.get("calls"))
            for computation in (module.computations.get(callee, ()),)
            for inner in computation
            if inner.opcode == "custom-call"
        ]
        if fused:
            for inner, inner_scope in fused:
                inner_location = (
                    metadata_location(module, inner.attributes.get("metadata")) if detail else None
                )
                target = unquote(inner.attributes.get("custom_call_target", '""'))
                flops, moved = dispatch_cost(module, inner, inner_scope) if detail else (0.0, 0.0)
                yield OpSite(op=CUSTOM_CALL_OP, target=target, location=inner_location or location,
                             flops=flops, bytes=moved)  # fmt: skip
            return
    flops, moved = dispatch_cost(module, instruction, scope) if detail else (0.0, 0.0)
    operands, results = _tiled_types(instruction, scope) if detail else ((), ())
    yield OpSite(op=f"{FUSION_OP}:{kind}", location=location, flops=flops, bytes=moved,
                 operand_types=operands, result_types=results)  # fmt: skip


_TILED = ":T("
"""What a tiled layout prints (``{0,1:T(8,128)}``): TPU's arrays have one, CPU's and GPU's
not."""
_SHAPE_ARRAY = re.compile(r"\b[a-z][a-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?")


def _tiled_types(
    instruction: HloInstruction, scope: Mapping[str, HloInstruction]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The arrays a dispatch reads and writes, each an HLO shape with its layout, where the
    compiler tiled them (``((), ())`` elsewhere: no layout finding reads untiled ones). An
    asynchronous start's result repeats its operands beside what it writes: only what it
    writes is a result."""
    if _TILED not in instruction.shape:
        return (), ()
    operands = [
        array
        for name in instruction.operands
        for array in _SHAPE_ARRAY.findall(operand_shape(scope, name))
    ]
    results = _SHAPE_ARRAY.findall(instruction.shape)
    if instruction.opcode.endswith("-start"):
        read = list(operands)
        written = []
        for array in results:
            if array in read:
                read.remove(array)
            else:
                written.append(array)
        results = written
    return tuple(a for a in operands if _TILED in a), tuple(a for a in results if _TILED in a)


def _fusion_kind(attributes: Mapping[str, str]) -> str:
    """The backend kind XLA chose for a fusion, else XLA's own fusion kind (``kLoop``...)."""
    config = _json_config(attributes.get("backend_config"))
    for key in ("fusion_backend_config", "fusion_config"):  # GPU, CPU
        fusion = config.get(key)
        if isinstance(fusion, dict) and isinstance(fusion.get("kind"), str):
            kind: str = fusion["kind"]
            custom = fusion.get("custom_fusion_config")
            if isinstance(custom, dict) and isinstance(custom.get("name"), str):
                kind = f"{kind}${custom['name']}"
            return kind
    return attributes.get("kind", "kLoop")


def _json_config(raw: str | None) -> dict[str, object]:
    if not raw:
        return {}
    text = unquote(raw) if raw.startswith('"') else raw
    try:
        value = json.loads(text)
    except ValueError:  # MLIR dictionary syntax (Pallas) or anything else: not a JSON config
        return {}
    return value if isinstance(value, dict) else {}


def _op_name(opcode: str) -> str:
    return "hlo." + opcode.replace("-", "_")


def _trip_count(attributes: Mapping[str, str]) -> int:
    """A while loop's known trip count (XLA records it in the backend config), else 1."""
    found = _TRIP_COUNT.search(attributes.get("backend_config", ""))
    return int(found.group(1)) if found else 1
