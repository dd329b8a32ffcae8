"""The transposes and copies XLA's layout assignment put around a library call (pure).

XLA's layout assignment gives a library call the layouts its kernels take (cuDNN NHWC on
Hopper, Eigen/YNNPACK NHWC/HWIO on CPU, K-minor operands for 8-bit GEMMs) and inserts a
transpose or copy where a neighbour's layout differs: a kernel of its own (a bare
transpose/copy, or a fusion of nothing else) or fused into the neighbour's kernel. The
user's own transposes (metadata ``op_name`` ending in ``transpose``) are not counted.
:func:`relayouts_around` gives them as a library call's op-site attributes
(:mod:`pytest_jaxport.model.hlo`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pytest_jaxport.model.hlo_cost import shape_bytes
from pytest_jaxport.model.hlo_text import (
    HloInstruction,
    HloModule,
    computation_refs,
    fused_instructions,
    unquote,
)

_PASS_THROUGH = frozenset({"bitcast", "get-tuple-element"})
_LAYOUT_OPCODES = frozenset({"transpose", "copy"})
_MATRIX_OPCODES = frozenset({"dot", "convolution"})
_LAYOUT_ONLY = _LAYOUT_OPCODES | _PASS_THROUGH | {"parameter", "reshape"}
"""A fusion of nothing else is a relayout kernel of its own."""
_LIBRARY_CALL = re.compile(r"^__(cudnn\$conv|cublas\$(gemm|lt\$matmul)|onednn\$)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def _called_opcodes(module: HloModule, instruction: HloInstruction) -> frozenset[str]:
    """The opcodes of the computations a fusion calls."""
    found: set[str] = set()
    for callee in computation_refs(instruction.attributes.get("calls")):
        opcodes = module.opcodes.get(callee)
        if opcodes is None:
            computation = module.computations.get(callee, ())
            opcodes = module.opcodes[callee] = frozenset(op.opcode for op in computation)
        found |= opcodes
    return frozenset(found)


def _is_matrix_call(module: HloModule, instruction: HloInstruction) -> bool:
    """A library GEMM or convolution, or a kernel XLA built around a dot or convolution."""
    if instruction.opcode in _MATRIX_OPCODES:
        return True
    if instruction.opcode == "custom-call":
        target = unquote(instruction.attributes.get("custom_call_target", '""'))
        return _LIBRARY_CALL.match(target) is not None
    if instruction.opcode == "fusion":
        return not _MATRIX_OPCODES.isdisjoint(_called_opcodes(module, instruction))
    return False


def _inserted_layout_op(instruction: HloInstruction) -> bool:
    """A transpose or copy the user did not ask for."""
    if instruction.opcode not in _LAYOUT_OPCODES:
        return False
    found = _OP_NAME.search(instruction.attributes.get("metadata", ""))
    return found is None or not found.group(1).rsplit("/", 1)[-1].startswith("transpose")


def _relayout_kind(module: HloModule, instruction: HloInstruction) -> str | None:
    """``kernel`` for a relayout that is a kernel of its own, ``fused`` for one fused into a
    neighbour's kernel, ``None`` for anything else."""
    if _inserted_layout_op(instruction):
        return "kernel"
    if instruction.opcode == "call":  # XLA:CPU's parallel task wrappers (jaxlib < 0.7)
        inner = [
            op
            for callee in computation_refs(instruction.attributes.get("to_apply"))
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
    if not any(_inserted_layout_op(inner) for inner in fused_instructions(module, instruction)):
        return None
    return "kernel" if opcodes <= _LAYOUT_ONLY else "fused"


def relayouts_around(
    module: HloModule,
    instruction: HloInstruction,
    scope: Mapping[str, HloInstruction],
    users: Mapping[str, list[HloInstruction]],
    claimed: set[str],
) -> tuple[tuple[str, str], ...]:
    """The relayouts feeding or reading a library call, as site attributes (``()`` for
    anything else, or none found). Each relayout counts once, for the first call it serves."""
    if not _is_matrix_call(module, instruction):
        return ()
    neighbours: list[HloInstruction] = []
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
        written += shape_bytes(neighbour.shape)
    if not count:
        return ()
    return (
        ("relayout_bytes", repr(written)),
        ("relayout_kernels", str(kernels)),
        ("relayouts", str(count)),
    )
