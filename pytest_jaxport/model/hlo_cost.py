"""What one compiled dispatch computes and moves: its flops and bytes, for the estimate (pure).

A fusion is one kernel: it reads its operands and writes its result once, whatever it does
in between, so its bytes are its signature's, not the sum of its ops'. Two refinements make
that what the kernel really moves: an operand the fused code only slices or gathers from is
read as the slices, and a fusion that updates a buffer in place (a dynamic-update-slice
root, as in a scan's output) writes the update, not the buffer. Its flops are its fused ops'
flops (:mod:`pytest_jaxport.model.flops`' arithmetic).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from pytest_jaxport.model.dtypes import element_bits
from pytest_jaxport.model.flops import (
    convolution_flops,
    dot_flops,
    fft_flops,
    is_solver,
    solver_flops,
)
from pytest_jaxport.model.hlo_text import (
    HloInstruction,
    HloModule,
    fused_instructions,
    instruction_scope,
    operand_shape,
    unquote,
)

FREE_OPCODES = frozenset(
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
"""Opcodes that name values rather than run anything: no dispatch, no cost."""

_MOVES_NOTHING = frozenset(
    {"broadcast", "reshape", "transpose", "copy", "slice", "dynamic-slice", "concatenate",
     "pad", "iota", "gather", "dynamic-update-slice", "reverse", "copy-start"}
) | FREE_OPCODES  # fmt: skip
"""Opcodes that move data without arithmetic (no flops)."""

_READS_PART = frozenset({"slice", "dynamic-slice", "gather"})
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([^\]]*)\]")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dim[a-z]*\W+\{?\[?([0-9, \"]*)")
_DIM_LABELS = re.compile(r"^[^_]*_([^-]*)->")


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


def shape_bytes(shape: str) -> float:
    """The bytes a printed HLO shape holds (every array of a tuple)."""
    return sum(_count(dims) * bits / 8 for dims, bits in _arrays(shape))


def _count(dims: tuple[int, ...]) -> float:
    n = 1.0
    for d in dims:
        n *= d
    return n


def _dims(shape: str) -> tuple[int, ...]:
    arrays = _arrays(shape)
    return arrays[0][0] if arrays else ()


def _operand(instruction: HloInstruction, scope: Mapping[str, HloInstruction], i: int) -> str:
    if i < len(instruction.operands):
        found = scope.get(instruction.operands[i])
        if found is not None:
            return found.shape
    return ""


def dispatch_cost(
    module: HloModule, instruction: HloInstruction, scope: Mapping[str, HloInstruction]
) -> tuple[float, float]:
    """``(flops, bytes)`` of one dispatch."""
    return _flops(module, instruction, scope, depth=0), _moved(module, instruction, scope)


def _moved(
    module: HloModule, instruction: HloInstruction, scope: Mapping[str, HloInstruction]
) -> float:
    opcode = instruction.opcode
    if opcode in _READS_PART:
        return 2 * shape_bytes(instruction.shape)
    if opcode == "dynamic-update-slice":
        return 2 * shape_bytes(_operand(instruction, scope, 1))
    operands = dict.fromkeys(instruction.operands)
    if opcode != "fusion" or not (fused := fused_instructions(module, instruction)):
        return shape_bytes(instruction.shape) + sum(
            shape_bytes(operand_shape(scope, o)) for o in operands
        )
    inner = instruction_scope(fused)
    users: dict[str, list[HloInstruction]] = {}
    for op in fused:
        for name in op.operands:
            users.setdefault(name, []).append(op)
    written = shape_bytes(instruction.shape)
    read = 0.0
    for op in fused:
        if op.opcode != "parameter":
            continue
        uses = users.get(op.name, [])
        if uses and all(u.opcode in _READS_PART and u.operands[:1] == (op.name,) for u in uses):
            read += sum(shape_bytes(u.shape) for u in uses)
        elif uses and all(
            u.opcode == "dynamic-update-slice" and u.operands[:1] == (op.name,) for u in uses
        ):
            written = sum(shape_bytes(_operand(u, inner, 1)) for u in uses)  # in place
        else:
            read += shape_bytes(op.shape)
    return read + written


def _flops(
    module: HloModule,
    instruction: HloInstruction,
    scope: Mapping[str, HloInstruction],
    *,
    depth: int,
) -> float:
    opcode = instruction.opcode
    if opcode == "fusion":
        if depth > 8:
            return 0.0
        fused = fused_instructions(module, instruction)
        inner = instruction_scope(fused)
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
        opcode == "custom-call" and is_solver(unquote(attributes.get("custom_call_target", "")))
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


def _convolution_flops(instruction: HloInstruction, scope: Mapping[str, HloInstruction]) -> float:
    out = _count(_dims(instruction.shape))
    kernel = _dims(_operand(instruction, scope, 1))
    labels = _DIM_LABELS.match(instruction.attributes.get("dim_labels", ""))
    rhs = labels.group(1) if labels else ""
    features = kernel[rhs.index("o")] if "o" in rhs and len(rhs) == len(kernel) else 1
    return convolution_flops(out, kernel, features)
