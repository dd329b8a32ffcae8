"""Read post-optimization HLO text (``compiled.as_text()``) into a census :class:`Program`.

This is the compiled level's counterpart of reading StableHLO: one :class:`~census.OpSite`
per dispatch XLA will make, so :func:`census.take_census` can classify compiled programs
with the same call weighting and source attribution as lowered ones. Pure: no jax import.

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
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from pytest_jaxport.model.census import OpSite, Program, StackFrame, location_text, quoted
from pytest_jaxport.model.cost import (
    convolution_flops,
    dot_flops,
    fft_flops,
    is_solver,
    solver_flops,
)
from pytest_jaxport.model.dtypes import element_bits

CALL_OP = "call"
"""The op name :mod:`census` follows into another computation (one of ``census.CALL_OPS``)."""

FUSION_OP = "hlo.fusion"
CUSTOM_CALL_OP = "hlo.custom_call"

_FREE = frozenset(
    {
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "opt-barrier",
        "after-all",
        "add-dependency",
        "domain",
    }
)
"""Opcodes that name values rather than run anything."""

_DYNAMIC_SLICE_FUSIONS = frozenset(
    {"dynamic_slice_fusion", "address_computation", "dynamic_address_computation"}
)
"""Custom fusions that only compute addresses for the library call (or copy) they wrap."""

_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*")
_OPCODE = re.compile(r"\s*(?P<opcode>[a-z][a-z0-9\-]*)\(")
_SIGNIFICANT = re.compile(r'"(?:[^"\\]|\\.)*"|[(){}\[\],]')
_METADATA_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')
_COMPUTATION_REF = re.compile(r"%?([^\s,{}%]+)")
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_OPERAND = re.compile(r"%([^\s,()]+)")
_OPENERS = {"(": ")", "{": "}", "[": "]"}
_ENTRY_LAYOUT = "entry_computation_layout={"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Instruction:
    name: str
    opcode: str
    attributes: Mapping[str, str]
    shape: str = ""
    """The result type as printed (``f32[64,512]{1,0}``, or a tuple of them)."""
    operands: tuple[str, ...] = ()
    """Operand instruction names, in order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Module:
    entry: str
    computations: Mapping[str, tuple[_Instruction, ...]]
    frames: Mapping[int, tuple[StackFrame, ...]]
    entry_layout: str = ""
    """The module's ``entry_computation_layout``, without its braces."""
    opcodes: dict[str, frozenset[str]] = field(default_factory=dict, compare=False)
    """Per computation, the opcodes it holds (filled as asked, by :func:`_called_opcodes`)."""


def parse_compiled_hlo(text: str) -> Program:
    """The dispatches of one compiled HLO module, per computation the program runs.

    ``text`` is ``jax.jit(f).lower(...).compile().as_text()`` (any backend). Where the
    compiler tiled the arrays (TPU), each dispatch keeps its operands' and results' shapes
    with their layouts, and the program its ``entry_computation_layout`` (what layout
    findings read: :mod:`pytest_jaxport.model.format_census`); the compile path adds what the
    compiler counted of its memory (``Program.memory``). Raises ``ValueError`` when the text
    has no ``ENTRY`` computation.
    """
    module = _parse_module(text)
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
    module = _parse_module(text, frames=False)
    sites: dict[str, OpSite] = {}
    for instructions in module.computations.values():
        scope = _scope(instructions)
        for instruction in instructions:
            for site in _instruction_sites(module, instruction, scope, detail=False):
                if site.op != CALL_OP:
                    sites.setdefault(instruction.name, site)
                    break
    return sites


def _sites(module: _Module, instructions: tuple[_Instruction, ...]) -> Iterator[OpSite]:
    scope = _scope(instructions)
    users = _users(instructions)
    claimed: set[str] = set()
    for instruction in instructions:
        relayouts = _relayouts(module, instruction, scope, users, claimed)
        for site in _instruction_sites(module, instruction, scope):
            yield replace(site, attributes=relayouts) if relayouts and site.op != CALL_OP else site


def _scope(instructions: tuple[_Instruction, ...]) -> dict[str, _Instruction]:
    """Each instruction of one computation by name (what its operands refer to)."""
    return {instruction.name: instruction for instruction in instructions}


def _instruction_sites(
    module: _Module,
    instruction: _Instruction,
    scope: Mapping[str, _Instruction],
    *,
    detail: bool = True,
) -> Iterator[OpSite]:
    """The op sites of one instruction; without ``detail``, no locations and no costs (what
    the measured share needs: only what ran)."""
    opcode = instruction.opcode
    attributes = instruction.attributes
    if opcode in _FREE or opcode.endswith(("-done", "-update")):
        return
    location = _location(module, attributes.get("metadata")) if detail else None
    if opcode == "async-start":
        for callee in _computation_refs(attributes.get("calls")):
            yield OpSite(op=CALL_OP, target=callee, location=location)
        return
    if opcode == "call":
        for callee in _computation_refs(attributes.get("to_apply")):
            yield OpSite(op=CALL_OP, target=callee, location=location)
        return
    if opcode == "while":
        yield OpSite(op="hlo.while", location=location)
        trips = _trip_count(attributes)
        for key, runs in (("condition", trips + 1), ("body", trips)):
            for callee in _computation_refs(attributes.get(key)):
                yield OpSite(op=CALL_OP, target=callee, location=location, runs=max(runs, 1))
        return
    if opcode == "conditional":
        yield OpSite(op="hlo.conditional", location=location)
        keys = ("branch_computations", "true_computation", "false_computation")
        for key in keys:
            for callee in _computation_refs(attributes.get(key)):
                yield OpSite(op=CALL_OP, target=callee, location=location)
        return
    if opcode == "fusion":
        yield from _fusion_sites(module, instruction, scope, location, detail=detail)
        return
    flops, moved = _cost(module, instruction, scope) if detail else (0.0, 0.0)
    operands, results = _tiled_types(instruction, scope) if detail else ((), ())
    if opcode == "custom-call":
        target = _unquote(attributes.get("custom_call_target", '""'))
        yield OpSite(op=CUSTOM_CALL_OP, target=target, location=location, flops=flops,
                     bytes=moved, operand_types=operands, result_types=results)  # fmt: skip
        return
    if opcode.endswith("-start"):
        opcode = opcode.removesuffix("-start")
    yield OpSite(op=_op_name(opcode), location=location, flops=flops, bytes=moved,
                 operand_types=operands, result_types=results)  # fmt: skip


def _fusion_sites(
    module: _Module,
    instruction: _Instruction,
    scope: Mapping[str, _Instruction],
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
            (inner, _scope(computation))
            for callee in _computation_refs(instruction.attributes.get("calls"))
            for computation in (module.computations.get(callee, ()),)
            for inner in computation
            if inner.opcode == "custom-call"
        ]
        if fused:
            for inner, inner_scope in fused:
                inner_location = (
                    _location(module, inner.attributes.get("metadata")) if detail else None
                )
                target = _unquote(inner.attributes.get("custom_call_target", '""'))
                flops, moved = _cost(module, inner, inner_scope) if detail else (0.0, 0.0)
                yield OpSite(op=CUSTOM_CALL_OP, target=target, location=inner_location or location,
                             flops=flops, bytes=moved)  # fmt: skip
            return
    flops, moved = _cost(module, instruction, scope) if detail else (0.0, 0.0)
    operands, results = _tiled_types(instruction, scope) if detail else ((), ())
    yield OpSite(op=f"{FUSION_OP}:{kind}", location=location, flops=flops, bytes=moved,
                 operand_types=operands, result_types=results)  # fmt: skip


_TILED = ":T("
"""What a tiled layout prints (``{0,1:T(8,128)}``): TPU's arrays have one, CPU's and GPU's
not."""
_SHAPE_ARRAY = re.compile(r"\b[a-z][a-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?")


def _tiled_types(
    instruction: _Instruction, scope: Mapping[str, _Instruction]
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
        for array in _SHAPE_ARRAY.findall(_operand_shape(scope, name))
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
    text = _unquote(raw) if raw.startswith('"') else raw
    try:
        value = json.loads(text)
    except ValueError:  # MLIR dictionary syntax (Pallas) or anything else: not a JSON config
        return {}
    return value if isinstance(value, dict) else {}


def _op_name(opcode: str) -> str:
    return "hlo." + opcode.replace("-", "_")


def _computation_refs(raw: str | None) -> list[str]:
    if not raw:
        return []
    return _COMPUTATION_REF.findall(raw.strip().strip("{}"))


# --- relayouts around library calls ----------------------------------------------------
#
# XLA's layout assignment gives a library call the layouts its kernels take (cuDNN NHWC on
# Hopper, Eigen/YNNPACK NHWC/HWIO on CPU, K-minor operands for 8-bit GEMMs) and inserts a
# transpose or copy where a neighbour's layout differs: a kernel of its own (a bare
# transpose/copy, or a fusion of nothing else) or fused into the neighbour's kernel. The
# user's own transposes (metadata ``op_name`` ending in ``transpose``) are not counted.

_PASS_THROUGH = frozenset({"bitcast", "get-tuple-element"})
_LAYOUT_OPCODES = frozenset({"transpose", "copy"})
_MATRIX_OPCODES = frozenset({"dot", "convolution"})
_LAYOUT_ONLY = _LAYOUT_OPCODES | _PASS_THROUGH | {"parameter", "reshape"}
"""A fusion of nothing else is a relayout kernel of its own."""
_LIBRARY_CALL = re.compile(r"^__(cudnn\$conv|cublas\$(gemm|lt\$matmul)|onednn\$)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def _users(instructions: tuple[_Instruction, ...]) -> dict[str, list[_Instruction]]:
    users: dict[str, list[_Instruction]] = {}
    for instruction in instructions:
        for operand in dict.fromkeys(instruction.operands):
            users.setdefault(operand, []).append(instruction)
    return users


def _called_opcodes(module: _Module, instruction: _Instruction) -> frozenset[str]:
    """The opcodes of the computations a fusion calls."""
    found: set[str] = set()
    for callee in _computation_refs(instruction.attributes.get("calls")):
        opcodes = module.opcodes.get(callee)
        if opcodes is None:
            computation = module.computations.get(callee, ())
            opcodes = module.opcodes[callee] = frozenset(op.opcode for op in computation)
        found |= opcodes
    return frozenset(found)


def _is_matrix_call(module: _Module, instruction: _Instruction) -> bool:
    """A library GEMM or convolution, or a kernel XLA built around a dot or convolution."""
    if instruction.opcode in _MATRIX_OPCODES:
        return True
    if instruction.opcode == "custom-call":
        target = _unquote(instruction.attributes.get("custom_call_target", '""'))
        return _LIBRARY_CALL.match(target) is not None
    if instruction.opcode == "fusion":
        return not _MATRIX_OPCODES.isdisjoint(_called_opcodes(module, instruction))
    return False


def _inserted_layout_op(instruction: _Instruction) -> bool:
    """A transpose or copy the user did not ask for."""
    if instruction.opcode not in _LAYOUT_OPCODES:
        return False
    found = _OP_NAME.search(instruction.attributes.get("metadata", ""))
    return found is None or not found.group(1).rsplit("/", 1)[-1].startswith("transpose")


def _relayout_kind(module: _Module, instruction: _Instruction) -> str | None:
    """``kernel`` for a relayout that is a kernel of its own, ``fused`` for one fused into a
    neighbour's kernel, ``None`` for anything else."""
    if _inserted_layout_op(instruction):
        return "kernel"
    if instruction.opcode == "call":  # XLA:CPU's parallel task wrappers (jaxlib < 0.7)
        inner = [
            op
            for callee in _computation_refs(instruction.attributes.get("to_apply"))
            for op in module.computations.get(callee, ())
            if op.opcode != "parameter"
        ]
        kinds = {_relayout_kind(module, op) for op in inner}
        if not inner or None in kinds:
            return None
        return "fused" if "fused" in kinds else "kernel"
    if instruction.opcode != "fusion":
        return None
    opcodes = _called_opcodes(module, instruction)
    if _LAYOUT_OPCODES.isdisjoint(opcodes) or not _MATRIX_OPCODES.isdisjoint(opcodes):
        return None
    if not any(_inserted_layout_op(inner) for inner in _fused(module, instruction)):
        return None
    return "kernel" if opcodes <= _LAYOUT_ONLY else "fused"


def _relayouts(
    module: _Module,
    instruction: _Instruction,
    scope: Mapping[str, _Instruction],
    users: Mapping[str, list[_Instruction]],
    claimed: set[str],
) -> tuple[tuple[str, str], ...]:
    """The relayouts feeding or reading a library call, as site attributes (``()`` for
    anything else, or none found). Each relayout counts once, for the first call it serves."""
    if not _is_matrix_call(module, instruction):
        return ()
    neighbours: list[_Instruction] = []
    for name in dict.fromkeys(instruction.operands):
        producer = scope.get(name)
        while producer is not None and producer.opcode in _PASS_THROUGH and producer.operands:
            producer = scope.get(producer.operands[0])
        if producer is not None:
            neighbours.append(producer)
    pending = list(users.get(instruction.name, ()))
    while pending:
        user = pending.pop()
        if user.opcode in _PASS_THROUGH:
            pending.extend(users.get(user.name, ()))
        else:
            neighbours.append(user)
    count = kernels = 0
    written = 0.0
    for neighbour in neighbours:
        kind = None if neighbour.name in claimed else _relayout_kind(module, neighbour)
        if kind is None:
            continue
        claimed.add(neighbour.name)
        count += 1
        kernels += kind == "kernel"
        written += _bytes(neighbour.shape)
    if not count:
        return ()
    return (
        ("relayout_bytes", repr(written)),
        ("relayout_kernels", str(kernels)),
        ("relayouts", str(count)),
    )


# --- locations -------------------------------------------------------------------------


def _location(module: _Module, raw_metadata: str | None) -> str | None:
    if not raw_metadata:
        return None
    fields = dict(_METADATA_FIELD.findall(raw_metadata.strip()[1:-1]))
    frame_id = fields.get("stack_frame_id")
    if frame_id is not None and frame_id.isdigit():
        frames = module.frames.get(int(frame_id))
        if frames:
            return location_text(frames)
    source_file = fields.get("source_file")
    source_line = fields.get("source_line", "")
    if source_file and source_line.isdigit():
        return f"loc({quoted(_unquote(source_file))}:{int(source_line)}:0)"
    return None


def _stack_frames(tables: Mapping[str, Mapping[int, str]]) -> dict[int, tuple[StackFrame, ...]]:
    files = {k: _unquote(v) for k, v in tables.get("FileNames", {}).items()}
    functions = {k: _unquote(v) for k, v in tables.get("FunctionNames", {}).items()}
    locations: dict[int, StackFrame] = {}
    for key, raw in tables.get("FileLocations", {}).items():
        fields = _int_fields(raw)
        locations[key] = StackFrame(
            file=files.get(fields.get("file_name_id", 0), "?"),
            function=functions.get(fields.get("function_name_id", 0), "?"),
            line=fields.get("line", 0),
            column=fields.get("column", 0),
        )
    stack = {key: _int_fields(raw) for key, raw in tables.get("StackFrames", {}).items()}
    # The text printer writes parent ids one higher than the frame ids it lists (the root
    # frame reads as its own parent); a table with a 0 parent uses the ids as listed.
    offset = 0 if any(f.get("parent_frame_id") == 0 for f in stack.values()) else 1
    resolved: dict[int, tuple[StackFrame, ...]] = {}
    for key in stack:
        chain: list[StackFrame] = []
        seen: set[int] = set()
        current = key
        while current in stack and current not in seen:
            seen.add(current)
            location = locations.get(stack[current].get("file_location_id", 0))
            # Nested traces (scan bodies, inner jits) repeat their caller's frame.
            if location is not None and (not chain or chain[-1] != location):
                chain.append(location)
            current = stack[current].get("parent_frame_id", 0) - offset
        resolved[key] = tuple(chain)
    return resolved


def _int_fields(raw: str) -> dict[str, int]:
    return {k: int(v) for k, v in _METADATA_FIELD.findall(raw) if v.lstrip("-").isdigit()}


# --- costs -------------------------------------------------------------------------------
#
# What one dispatch computes and moves, for the runtime-share estimate. A fusion is one
# kernel: it reads its operands and writes its result once, whatever it does in between, so
# its bytes are its signature's, not the sum of its ops'. Two refinements make that what the
# kernel really moves: an operand the fused code only slices or gathers from is read as the
# slices, and a fusion that updates a buffer in place (a dynamic-update-slice root, as in a
# scan's output) writes the update, not the buffer. Its flops are its fused ops' flops.

_MOVES_NOTHING = frozenset(
    {"broadcast", "reshape", "transpose", "copy", "slice", "dynamic-slice", "concatenate",
     "pad", "iota", "gather", "dynamic-update-slice", "reverse", "copy-start"}
) | _FREE  # fmt: skip
"""Opcodes that move data without arithmetic (no flops)."""

_READS_PART = frozenset({"slice", "dynamic-slice", "gather"})
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([^\]]*)\]")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dim[a-z]*\W+\{?\[?([0-9, \"]*)")
_DIM_LABELS = re.compile(r"^[^_]*_([^-]*)->")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def _arrays(shape: str) -> list[tuple[tuple[int, ...], int]]:
    """Each array of a printed HLO shape: ``(dims, bits per element)``; tokens are empty."""
    arrays = []
    for element, dims in _ARRAY.findall(shape):
        if element == "token":
            continue
        bits = element_bits(element)
        sizes = tuple(int(d.removeprefix("<=")) for d in dims.split(",") if d.strip())
        arrays.append((sizes, bits))
    return arrays


def _bytes(shape: str) -> float:
    return sum(_count(dims) * bits / 8 for dims, bits in _arrays(shape))


def _count(dims: tuple[int, ...]) -> float:
    n = 1.0
    for d in dims:
        n *= d
    return n


def _dims(shape: str) -> tuple[int, ...]:
    arrays = _arrays(shape)
    return arrays[0][0] if arrays else ()


def _trip_count(attributes: Mapping[str, str]) -> int:
    """A while loop's known trip count (XLA records it in the backend config), else 1."""
    found = _TRIP_COUNT.search(attributes.get("backend_config", ""))
    return int(found.group(1)) if found else 1


def _operand(instruction: _Instruction, scope: Mapping[str, _Instruction], i: int) -> str:
    if i < len(instruction.operands):
        found = scope.get(instruction.operands[i])
        if found is not None:
            return found.shape
    return ""


def _cost(
    module: _Module, instruction: _Instruction, scope: Mapping[str, _Instruction]
) -> tuple[float, float]:
    """``(flops, bytes)`` of one dispatch."""
    return _flops(module, instruction, scope, depth=0), _moved(module, instruction, scope)


def _fused(module: _Module, instruction: _Instruction) -> tuple[_Instruction, ...]:
    return tuple(
        inner
        for callee in _computation_refs(instruction.attributes.get("calls"))
        for inner in module.computations.get(callee, ())
    )


def _moved(module: _Module, instruction: _Instruction, scope: Mapping[str, _Instruction]) -> float:
    opcode = instruction.opcode
    if opcode in _READS_PART:
        return 2 * _bytes(instruction.shape)
    if opcode == "dynamic-update-slice":
        return 2 * _bytes(_operand(instruction, scope, 1))
    operands = dict.fromkeys(instruction.operands)
    if opcode != "fusion" or not (fused := _fused(module, instruction)):
        return _bytes(instruction.shape) + sum(_bytes(_operand_shape(scope, o)) for o in operands)
    inner = _scope(fused)
    users: dict[str, list[_Instruction]] = {}
    for op in fused:
        for name in op.operands:
            users.setdefault(name, []).append(op)
    written = _bytes(instruction.shape)
    read = 0.0
    for op in fused:
        if op.opcode != "parameter":
            continue
        uses = users.get(op.name, [])
        if uses and all(u.opcode in _READS_PART and u.operands[:1] == (op.name,) for u in uses):
            read += sum(_bytes(u.shape) for u in uses)
        elif uses and all(
            u.opcode == "dynamic-update-slice" and u.operands[:1] == (op.name,) for u in uses
        ):
            written = sum(_bytes(_operand(u, inner, 1)) for u in uses)  # in place
        else:
            read += _bytes(op.shape)
    return read + written


def _operand_shape(scope: Mapping[str, _Instruction], name: str) -> str:
    found = scope.get(name)
    return found.shape if found is not None else ""


def _flops(
    module: _Module, instruction: _Instruction, scope: Mapping[str, _Instruction], *, depth: int
) -> float:
    opcode = instruction.opcode
    if opcode == "fusion":
        if depth > 8:
            return 0.0
        fused = _fused(module, instruction)
        inner = _scope(fused)
        return sum(_flops(module, op, inner, depth=depth + 1) for op in fused)
    if opcode in _MOVES_NOTHING:
        return 0.0
    outputs = sum(_count(dims) for dims, _ in _arrays(instruction.shape))
    attributes = instruction.attributes
    if opcode == "dot" or (opcode == "custom-call" and _is_gemm(attributes)):
        lhs = _dims(_operand(instruction, scope, 0))
        return dot_flops(_count(_dims(instruction.shape)), _contracted(attributes, lhs))
    if opcode == "convolution" or (
        opcode == "custom-call" and "conv" in attributes.get("custom_call_target", "")
    ):
        return _convolution_flops(instruction, scope)
    if opcode == "fft":
        return fft_flops(outputs)
    if opcode == "sort":
        n = _count(_dims(_operand(instruction, scope, 0)))
        return n * max(math.log2(max(n, 2.0)), 1.0)
    if opcode in ("reduce", "reduce-window", "reduce-scatter", "all-reduce"):
        return _count(_dims(_operand(instruction, scope, 0)))
    if opcode == "triangular-solve":
        lhs, rhs = _dims(_operand(instruction, scope, 0)), _dims(_operand(instruction, scope, 1))
        return _count(lhs) * (rhs[-1] if rhs else 1)
    if opcode == "cholesky" or (
        opcode == "custom-call" and is_solver(_unquote(attributes.get("custom_call_target", "")))
    ):
        dims = _dims(_operand(instruction, scope, 0))
        return solver_flops(dims) if len(dims) >= 2 else outputs
    return outputs


def _is_gemm(attributes: Mapping[str, str]) -> bool:
    target = attributes.get("custom_call_target", "")
    return ("cublas" in target and "triangularSolve" not in target) or "matmul" in target


def _contracted(attributes: Mapping[str, str], lhs: tuple[int, ...]) -> float:
    raw = attributes.get("lhs_contracting_dims")
    if raw is None:
        found = _LHS_CONTRACTING.search(attributes.get("backend_config", ""))
        raw = found.group(1) if found else ""
    k = 1.0
    for d in raw.replace('"', "").strip("{}").split(","):
        if d.strip().isdigit() and int(d) < len(lhs):
            k *= lhs[int(d)]
    return k


def _convolution_flops(instruction: _Instruction, scope: Mapping[str, _Instruction]) -> float:
    out = _count(_dims(instruction.shape))
    kernel = _dims(_operand(instruction, scope, 1))
    labels = _DIM_LABELS.match(instruction.attributes.get("dim_labels", ""))
    rhs = labels.group(1) if labels else ""
    features = kernel[rhs.index("o")] if "o" in rhs and len(rhs) == len(kernel) else 1
    return convolution_flops(out, kernel, features)


# --- text scanning ----------------------------------------------------------------------


def _parse_module(text: str, *, frames: bool = True) -> _Module:
    """Computations and (with ``frames``) the stack-frame tables locations are read from, and
    the shapes and operands costs are read from."""
    tables: dict[str, dict[int, str]] = {}
    computations: dict[str, tuple[_Instruction, ...]] = {}
    entry: str | None = None
    table: dict[int, str] | None = None
    current: list[_Instruction] | None = None
    current_name = ""
    entry_layout = ""
    for line in text.splitlines():
        if current is not None:
            if line.startswith("}"):
                computations[current_name] = tuple(current)
                current = None
            else:
                instruction = _parse_instruction(line, shapes=frames)
                if instruction is not None:
                    current.append(instruction)
            continue
        if not line.strip():
            table = None
            continue
        if table is not None:
            row = _TABLE_ROW.match(line)
            if row:
                table[int(row.group(1))] = row.group(2)
                continue
            table = None
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = tables.setdefault(line, {})
            continue
        if line.startswith("HloModule") and not entry_layout:
            at = line.find(_ENTRY_LAYOUT)
            if at >= 0:
                start = at + len(_ENTRY_LAYOUT) - 1
                entry_layout = line[start + 1 : _close(line, start) - 1]
            continue
        header = _COMPUTATION.match(line)
        if header:
            current_name = header.group("name")
            current = []
            if header.group("entry") and entry is None:
                entry = current_name
    if entry is None:
        raise ValueError("not a compiled HLO module: no ENTRY computation in the text")
    resolved = _stack_frames(tables) if frames else {}
    return _Module(entry=entry, computations=computations, frames=resolved,
                   entry_layout=entry_layout)  # fmt: skip


def _parse_instruction(line: str, *, shapes: bool = True) -> _Instruction | None:
    head = _INSTRUCTION.match(line)
    if head is None:
        return None
    position = head.end()
    if line.startswith("(", position):  # tuple shape
        position = _close(line, position)
    else:
        while position < len(line) and not line[position].isspace():
            position += 1
    opcode = _OPCODE.match(line, position)
    if opcode is None:
        return None
    operands_end = _close(line, opcode.end() - 1)
    attributes: dict[str, str] = {}
    for item in _split_top_level(line[operands_end:]):
        key, sep, value = item.strip().partition("=")
        if sep:
            attributes[key.strip()] = value.strip()
    return _Instruction(
        name=head.group("name"),
        opcode=opcode.group("opcode"),
        attributes=attributes,
        shape=line[head.end() : position].strip() if shapes else "",
        operands=tuple(_OPERAND.findall(line, opcode.end(), operands_end - 1)) if shapes else (),
    )


def _close(text: str, start: int) -> int:
    """The index just past the bracket that closes ``text[start]``."""
    depth = 0
    for match in _SIGNIFICANT.finditer(text, start):
        token = match.group()
        if token in _OPENERS:
            depth += 1
        elif token in (")", "}", "]"):
            depth -= 1
            if depth == 0:
                return match.end()
    return len(text)


def _split_top_level(text: str) -> list[str]:
    """Split on the commas outside any brackets or strings."""
    parts: list[str] = []
    depth = 0
    begin = 0
    for match in _SIGNIFICANT.finditer(text):
        token = match.group()
        if token in _OPENERS:
            depth += 1
        elif token in (")", "}", "]"):
            depth -= 1
        elif token == "," and depth == 0:
            parts.append(text[begin : match.start()])
            begin = match.end()
    parts.append(text[begin:])
    return [part for part in parts if part.strip()]


_ESCAPE = re.compile(r"\\(.)")


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return _ESCAPE.sub(lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), value)
