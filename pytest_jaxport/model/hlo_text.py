"""Read post-optimization HLO text (``compiled.as_text()``): computations and instructions (pure).

:func:`parse_hlo_module` reads a module's computations, each instruction's name, opcode,
attributes, result shape and operands, its ``entry_computation_layout`` and the stack-frame
tables its metadata points into; :func:`metadata_location` renders an instruction's
metadata as MLIR location text. What the program dispatches is :mod:`pytest_jaxport.model.hlo`'s,
what each dispatch costs :mod:`pytest_jaxport.model.hlo_cost`'s.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pytest_jaxport.model.census import StackFrame, location_text, quoted

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
_ESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True, kw_only=True)
class HloInstruction:
    """One instruction of a computation, as printed: its name, opcode and attributes (each
    attribute's value as text)."""

    name: str
    opcode: str
    attributes: Mapping[str, str]
    shape: str = ""
    """The result type as printed (``f32[64,512]{1,0}``, or a tuple of them)."""
    operands: tuple[str, ...] = ()
    """Operand instruction names, in order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HloModule:
    """A module's computations by name, its entry computation and the stack frames its
    instructions' metadata point into (by frame id, innermost first)."""

    entry: str
    computations: Mapping[str, tuple[HloInstruction, ...]]
    frames: Mapping[int, tuple[StackFrame, ...]]
    entry_layout: str = ""
    """The module's ``entry_computation_layout``, without its braces."""
    opcodes: dict[str, frozenset[str]] = field(default_factory=dict, compare=False)
    """Per computation, the opcodes it holds (filled as asked, by
    :mod:`pytest_jaxport.model.hlo_relayouts`)."""


def parse_hlo_module(text: str, *, frames: bool = True) -> HloModule:
    """Computations and (with ``frames``) the stack-frame tables locations are read from, and
    the shapes and operands costs are read from."""
    tables: dict[str, dict[int, str]] = {}
    computations: dict[str, tuple[HloInstruction, ...]] = {}
    entry: str | None = None
    table: dict[int, str] | None = None
    current: list[HloInstruction] | None = None
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
    return HloModule(entry=entry, computations=computations, frames=resolved,
                   entry_layout=entry_layout)  # fmt: skip


def _parse_instruction(line: str, *, shapes: bool = True) -> HloInstruction | None:
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
    return HloInstruction(
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


def unquote(value: str) -> str:
    """An attribute's string value without its quotes, its escapes resolved."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return _ESCAPE.sub(lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), value)


def computation_refs(raw: str | None) -> list[str]:
    """The computations an attribute names (``calls=%f``, ``branch_computations={%a, %b}``)."""
    if not raw:
        return []
    return _COMPUTATION_REF.findall(raw.strip().strip("{}"))


def instruction_scope(instructions: tuple[HloInstruction, ...]) -> dict[str, HloInstruction]:
    """Each instruction of one computation by name (what its operands refer to)."""
    return {instruction.name: instruction for instruction in instructions}


def instruction_users(instructions: tuple[HloInstruction, ...]) -> dict[str, list[HloInstruction]]:
    """The instructions that read each instruction of one computation, by its name."""
    users: dict[str, list[HloInstruction]] = {}
    for instruction in instructions:
        for operand in dict.fromkeys(instruction.operands):
            users.setdefault(operand, []).append(instruction)
    return users


def fused_instructions(
    module: HloModule, instruction: HloInstruction
) -> tuple[HloInstruction, ...]:
    """The instructions of the computations a fusion calls."""
    return tuple(
        inner
        for callee in computation_refs(instruction.attributes.get("calls"))
        for inner in module.computations.get(callee, ())
    )


def operand_shape(scope: Mapping[str, HloInstruction], name: str) -> str:
    """The printed shape of the instruction ``name`` in ``scope`` (``""`` where unknown)."""
    found = scope.get(name)
    return found.shape if found is not None else ""


def metadata_location(module: HloModule, raw_metadata: str | None) -> str | None:
    """An instruction's ``metadata={...}`` as MLIR location text (its stack frames where the
    module has them, else its source file and line), ``None`` where it names no source."""
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
        return f"loc({quoted(unquote(source_file))}:{int(source_line)}:0)"
    return None


def _stack_frames(tables: Mapping[str, Mapping[int, str]]) -> dict[int, tuple[StackFrame, ...]]:
    files = {k: unquote(v) for k, v in tables.get("FileNames", {}).items()}
    functions = {k: unquote(v) for k, v in tables.get("FunctionNames", {}).items()}
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
