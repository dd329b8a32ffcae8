"""The StableHLO reader: the ops of a lowered module, for the census (:func:`read_program`),
one program per platform of a lowering for several at once (:func:`read_programs`).

Ops XLA folds into constants (those whose operands all derive from constants) are not read.
An op keeps its location as its frames up to the first that is the user's code.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, cast

from pytest_jaxport.model.census import (
    CALL_OPS,
    UNCOUNTED_OPS,
    OpSite,
    Program,
    StackFrame,
    is_library_file,
    location_text,
)
from pytest_jaxport.model.classification import CLASSIFICATION_RULES
from pytest_jaxport.model.flops import FREE_OPS, op_cost
from pytest_jaxport.model.format_rules import is_notable

if TYPE_CHECKING:
    from jax.stages import Lowered
    from jaxlib.mlir import ir

# Ops whose regions are reducer computations applied per element, not kernels of their own.
_REDUCER_OPS = frozenset(
    {
        "stablehlo.reduce",
        "stablehlo.reduce_window",
        "stablehlo.sort",
        "stablehlo.scatter",
        "stablehlo.select_and_scatter",
        "stablehlo.all_reduce",
        "stablehlo.reduce_scatter",
    }
)


def read_program(lowered: Lowered) -> Program:
    """The ops of every function of the lowered StableHLO module, for the census."""
    (program,) = read_programs(lowered, 1)
    return program


def read_programs(lowered: Lowered, platforms: int) -> tuple[Program, ...]:
    """One :class:`Program` per platform of a lowering for ``platforms`` platforms at once.

    A multi-platform lowering (``traced.lower(lowering_platforms=(p0, p1, ...))``, the form
    ``jax.export`` uses) passes the platform's index to every function as an argument marked
    ``jax.global_constant = "_platform_index"``, and emits ``stablehlo.case`` only where a
    lowering rule differs per platform: cases on that index map it to a rule's index, and a
    case on the rule's index holds each rule's ops. Program ``i`` is the module as platform
    ``i`` runs it: every case whose index is known for ``i`` (the platform index, a scalar
    ``i32`` constant, or a case that returns such values) is replaced by the ops of the branch
    it takes. The module is read once; functions without such cases are shared.

    A single-platform lowering (``platforms=1``) gets the same treatment: there the index
    arrives as a constant (``lax.platform_dependent``), so both forms give the same program.
    """
    module = cast("ir.Module", lowered.compiler_ir("stablehlo"))
    funcs: dict[str, ir.OpView] = {}
    public: list[str] = []
    for func in module.body.operations:
        name = _symbol(func.attributes["sym_name"])
        funcs[name] = func
        if "sym_visibility" not in func.attributes:
            public.append(name)
    entry = "main" if "main" in funcs else (public or list(funcs) or ["main"])[0]
    reader = _Reader(platforms, funcs)
    reader.read(entry, ())  # and, call by call, every function some platform can reach
    functions: list[dict[str, tuple[OpSite, ...]]] = [{} for _ in range(platforms)]
    for name, items in reader.items.items():
        for i, sites in enumerate(_project(items, platforms)):
            functions[i][name] = sites
    count = _partition_count(module)
    return tuple(
        Program(entry=entry, functions=_reachable(entry, f), partitions=count) for f in functions
    )


def _partition_count(module: ir.Module) -> int:
    """``mhlo.num_partitions`` of a module (1 when it has none)."""
    attributes = module.operation.attributes
    if "mhlo.num_partitions" not in attributes:
        return 1
    found = re.search(r"-?\d+", str(attributes["mhlo.num_partitions"]))
    return max(int(found.group()), 1) if found else 1


def _reachable(
    entry: str, functions: dict[str, tuple[OpSite, ...]]
) -> dict[str, tuple[OpSite, ...]]:
    """``functions`` without those no call from ``entry`` reaches on this platform (a
    multi-platform module holds functions only another platform's branches call)."""
    seen = {entry}
    pending = [entry]
    while pending:
        for site in functions.get(pending.pop(), ()):
            if site.op in CALL_OPS and site.target is not None and site.target not in seen:
                seen.add(site.target)
                pending.append(site.target)
    if len(seen) >= len(functions):
        return functions
    return {name: sites for name, sites in functions.items() if name in seen}


_PLATFORM_INDEX = '"_platform_index"'
_SCALAR_INDEX = "tensor<i32>"
_DENSE_INT = re.compile(r"dense<(-?\d+)>")
_INTEGER_SCALAR = re.compile(r"tensor<u?i\d+>")


@dataclass(frozen=True, slots=True)
class _Switch:
    """A case on a platform-dependent index: per platform, the branch it takes."""

    branches: tuple[list[_Item], ...]
    taken: tuple[int, ...]


_Site = tuple[
    str, "str | None", "str | None", float, float, tuple[str, ...], tuple[str, ...],
    tuple[tuple[str, str], ...],
]  # fmt: skip
"""An op as read: ``(op, target, location, flops, bytes, operand types, result types,
attributes)``, an :class:`OpSite` to be."""
_Item = _Site | _Switch
_Known = dict["ir.Value[ir.Type]", tuple[int, ...]]
"""What the reader knows of a value: the ``i32`` it holds, per platform."""
_CostKey = tuple[str, "str | None", tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]


def _project(items: list[_Item], platforms: int) -> list[tuple[OpSite, ...]]:
    """Per platform, the sites of ``items`` with every switch resolved, identical ops grouped
    into one site with a count (in the order they first occur)."""
    if not any(isinstance(item, _Switch) for item in items):
        shared = _grouped(items)  # type: ignore[arg-type]  # no switch: sites only
        return [shared] * platforms

    def flatten(items: list[_Item], platform: int, out: list[_Site]) -> None:
        for item in items:
            if isinstance(item, _Switch):
                flatten(item.branches[item.taken[platform]], platform, out)
            else:
                out.append(item)

    projected = []
    for platform in range(platforms):
        out: list[_Site] = []
        flatten(items, platform, out)
        projected.append(_grouped(out))
    return projected


def _grouped(sites: list[_Site]) -> tuple[OpSite, ...]:
    grouped = []
    for (op, target, location, flops, moved, operands, results, attributes), n in Counter(
        sites
    ).items():
        grouped.append(
            OpSite(op=op, target=target, location=location, flops=flops, bytes=moved, count=n,
                   operand_types=operands, result_types=results, attributes=attributes)
        )  # fmt: skip
    return tuple(grouped)


class _Reader:
    """Reads op sites off MLIR regions, resolving cases on known (per-platform) indices."""

    def __init__(self, platforms: int, funcs: Mapping[str, ir.OpView]) -> None:
        self.platforms = platforms
        self.funcs = funcs
        self.index = tuple(range(platforms))
        """What the platform-index argument holds, per platform."""
        self.items: dict[str, list[_Item]] = {}
        self.types: dict[ir.Type, str] = {}  # MLIR types are uniqued: stringify each one once
        self.costs: dict[_CostKey, tuple[float, float]] = {}
        self.locations: dict[ir.Attribute, str] = {}
        self.stacks: dict[ir.Attribute, tuple[StackFrame, ...] | None] = {}  # see location_text
        self.free: dict[tuple[str, frozenset[int]], bool] = {}  # see index_free_call
        self.folded: set[ir.Value[ir.Type]] = set()  # see folds

    def read(self, name: str, index_arguments: Sequence[int]) -> None:
        """Read function ``name`` (once), knowing which arguments hold the platform index.

        Functions lowered from a jaxpr mark that argument (``jax.global_constant``); the
        functions JAX emits for cached lowering rules do not, but receive it from their
        callers: a call passes it on, so functions are read in call order from the entry.
        """
        if name in self.items or name not in self.funcs:
            return
        items: list[_Item] = []
        self.items[name] = items  # before reading: StableHLO forbids recursion, but never loop
        func = self.funcs[name]
        known: _Known = {}
        if func.regions and func.regions[0].blocks:
            arguments = func.regions[0].blocks[0].arguments
            for i in {*index_arguments, *_marked_index_arguments(func)}:
                if i < len(arguments):
                    known[arguments[i]] = self.index
        for region in func.regions:
            self.collect(region, items, known)

    def type_texts(self, values: Iterable[ir.Value[ir.Type]]) -> list[str]:
        types = self.types
        texts = []
        for value in values:
            kind = value.type
            text = types.get(kind)
            if text is None:
                text = types[kind] = str(kind)
            texts.append(text)
        return texts

    def collect(self, region: ir.Region, items: list[_Item], known: _Known) -> None:
        """Append the sites of ``region`` to ``items``; ``known`` maps values whose content
        is a known ``i32`` per platform to those values (updated as constants are read)."""
        append = items.append
        for block in region.blocks:
            for op in block.operations:
                operation = op.operation
                name = operation.name
                if name == "stablehlo.case":
                    index = known.get(operation.operands[0])
                    if index is not None:
                        self.resolve_case(operation, index, items, known)
                        continue
                    if self.platforms > 1 and _per_platform(
                        operation.operands[0], known, self.index_free_call
                    ):
                        raise ValueError(
                            "a case on a value computed from the platform index in a way the "
                            "census cannot resolve; lower for each platform instead"
                        )
                elif name == "stablehlo.convert" and self.platforms > 1:
                    value = known.get(operation.operands[0])
                    if value is not None and len(set(value)) > 1:
                        # the platform index as i32 (JAX converts it when it is i64, under
                        # x64): plumbing a single-platform lowering does not have
                        known[operation.results[0]] = value
                        continue
                target = None
                if name == "stablehlo.custom_call":
                    target = _symbol(operation.attributes["call_target_name"])
                elif name in CALL_OPS:
                    target = _symbol(operation.attributes["callee"])
                    self.read(target, [
                        i for i, value in enumerate(operation.operands)
                        if known.get(value) == self.index
                    ] if self.platforms > 1 else ())  # fmt: skip
                if name in UNCOUNTED_OPS:  # no census counts them: not even a site
                    if name == "stablehlo.constant":
                        self.constant(operation, known)
                        self.folded.update(operation.results)
                    continue
                if self.folded and self.folds(operation):
                    continue  # XLA computes it while compiling: no kernel runs it
                if name in FREE_OPS and name not in _TYPED_FREE_OPS:
                    flops, moved, operand_types, result_types, attributes = _UNTYPED
                else:
                    flops, moved, operand_types, result_types, attributes = self.cost(
                        operation, target
                    )
                keep = _keeps_location(name) or any(map(is_notable, operand_types + result_types))
                location = self.location_text(operation.location) if keep else None
                append((name, target, location, flops, moved, operand_types, result_types,
                        attributes))  # fmt: skip
                if name not in _REDUCER_OPS:
                    if self.platforms > 1:
                        _forward_known(operation, known)
                    for nested in operation.regions:
                        self.collect(nested, items, known)

    def folds(self, operation: ir.Operation) -> bool:
        """Whether XLA folds ``operation`` into a constant while compiling (its results are
        then folded too): every operand derives from constants only, through ops XLA's
        constant folding evaluates (not a custom call, a call, control flow, a collective,
        random bits or anything with effects; not a result over XLA's size limit). An
        ``iota`` is not a constant to XLA (``jnp.eye(n) @ c`` is not folded); a broadcast of a
        constant is, to the ops it feeds (``jnp.full((n, n), c) @ d`` is; checked on the
        compiled CPU program), but is itself kept and counted. A dot of a rotation matrix
        built from a bound angle with a constant centre never reaches cuBLAS: counting it
        would be a gemm and a format finding no kernel has."""
        name = operation.name
        if name in _NOT_FOLDED or not name.startswith("stablehlo."):
            return False
        operands = operation.operands
        folded = self.folded
        if not operands or not all(operand in folded for operand in operands):
            return False
        if any(_elements(t) > _FOLDED_ELEMENTS for t in self.type_texts(operation.results)):
            return False
        folded.update(operation.results)
        # XLA never folds a broadcast itself (it would make constants larger): it stays, a
        # free op fused into its users, and only what it feeds folds.
        return name != "stablehlo.broadcast_in_dim"

    def index_free_call(self, operation: ir.Operation, handed: Sequence[int]) -> bool:
        """Whether ``operation`` is a call of a function whose results cannot depend on the
        values it is handed at positions ``handed`` (the platform index: the functions JAX
        lowers from jaxprs all receive it, most only to hand it on). They must be used by
        nothing but calls that hand them on to such functions in turn (a case on one,
        arithmetic on it or returning it makes the function depend on it)."""
        if operation.name not in CALL_OPS:
            return False
        try:
            callee = _symbol(operation.attributes["callee"])
            return self._index_free(callee, frozenset(handed), set())
        except Exception:  # bindings without use lists: assume it depends on the index
            return False

    def _index_free(self, name: str, handed: frozenset[int], visiting: set[str]) -> bool:
        found = self.free.get((name, handed))
        if found is not None:
            return found
        func = self.funcs.get(name)
        if func is None or name in visiting or not func.regions or not func.regions[0].blocks:
            return False
        visiting.add(name)
        arguments = func.regions[0].blocks[0].arguments
        free = True
        for i in sorted(handed | _marked_index_arguments(func)):
            if i >= len(arguments):
                continue
            for use in arguments[i].uses:
                owner = use.owner
                owner = getattr(owner, "operation", owner)
                if owner.name not in CALL_OPS or not self._index_free(
                    _symbol(owner.attributes["callee"]),
                    frozenset({use.operand_number}),
                    visiting,
                ):
                    free = False
                    break
            if not free:
                break
        visiting.discard(name)
        self.free[(name, handed)] = free
        return free

    def location_text(self, location: ir.Location) -> str:
        """The text of an op's location, once per distinct location (a uniqued attribute: the
        ops of one equation share it): its call stack, innermost frame first, up to the first
        frame that is the user's code (``census.is_library_file``; no census looks further,
        whatever ``own_packages`` says). ``str(location)`` would print every frame (a
        callsite chain of up to :data:`_LOCATION_FRAMES`, ~6 KB under a diffrax solve: slow
        to build, large to keep); it remains for locations this reader does not take apart.
        """
        try:
            attribute = location.attr
            text = self.locations.get(attribute)
        except (AttributeError, TypeError):  # bindings without it: as text every time
            return str(location)
        if text is None:
            frames = self.stack(location)
            text = str(location) if frames is None else location_text(frames)
            self.locations[attribute] = text
        return text

    def stack(self, location: ir.Location) -> tuple[StackFrame, ...] | None:
        """``location``'s frames, innermost first, up to the first that is the user's code
        (each callsite's read once: the callers many locations share); ``None`` for a location
        of a kind other than callsite, name and file, or bindings without their parts."""
        kind = _location_kind(location)
        if kind == "callsite":  # the callee's frames, then the caller's
            callsite = cast("ir.CallSiteLoc", location)  # jaxlib < 0.10: one Location class
            key = location.attr
            if key in self.stacks:
                return self.stacks[key]
            frames = self.stack(callsite.callee)
            if frames is not None and (not frames or is_library_file(frames[-1].file)):
                rest = self.stack(callsite.caller)
                frames = None if rest is None else frames + rest
            self.stacks[key] = frames
            return frames
        if kind == "name":  # JAX names each frame by its function
            named = cast("ir.NameLoc", location)
            frames = self.stack(named.child_loc)
            if frames is not None and len(frames) == 1 and not frames[0].function:
                return (replace(frames[0], function=named.name_str),)
            return frames
        if kind == "file":
            at = cast("ir.FileLineColLoc", location)
            return (StackFrame(file=at.filename, function="", line=at.start_line,
                               column=at.start_col),)  # fmt: skip
        return None

    def cost(self, operation: ir.Operation, target: str | None) -> _Typed:
        """``cost.op_cost`` of an op (computed once per distinct op, types and attributes),
        with its operand and result types and the attributes formats read."""
        name = operation.name
        operand_types = tuple(self.type_texts(operation.operands))
        result_types = tuple(self.type_texts(operation.results))
        attributes = _site_attributes(name, operation.attributes) if name in _ATTRIBUTES else ()
        key = (name, target, operand_types, result_types, attributes)
        found = self.costs.get(key)
        if found is None:
            found = self.costs[key] = op_cost(
                name, target, list(operand_types), list(result_types), dict(attributes)
            )
        return (*found, operand_types, result_types, attributes)

    def constant(self, operation: ir.Operation, known: _Known) -> None:
        """Remember the value of a scalar ``i32`` constant (a case index, maybe)."""
        [result] = operation.results
        if self.type_texts([result]) != [_SCALAR_INDEX]:
            return
        value = _DENSE_INT.fullmatch(str(operation.attributes["value"]).split(" :")[0])
        if value is not None:
            known[result] = (int(value.group(1)),) * self.platforms

    def resolve_case(
        self,
        operation: ir.Operation,
        index: tuple[int, ...],
        items: list[_Item],
        known: _Known,
    ) -> None:
        """A case whose index is known: only the branch each platform takes, without its
        ``stablehlo.return`` (the ops run inline); its results are known where every taken
        branch returns known values."""
        regions = list(operation.regions)
        last = len(regions) - 1
        # StableHLO: an index outside [0, N) takes the last branch
        taken = tuple(i if 0 <= i <= last else last for i in index)
        branches: list[list[_Item]] = []
        returned: list[list[tuple[int, ...] | None]] = []
        for number, region in enumerate(regions):
            if number not in taken:
                branches.append([])
                returned.append([])
                continue
            branch: list[_Item] = []
            self.collect(region, branch, known)  # without its stablehlo.return (uncounted)
            terminator = _terminator(region)
            branches.append(branch)
            returned.append(
                [known.get(v) for v in terminator.operands] if terminator is not None else []
            )
        for position, result in enumerate(operation.results):
            values = []
            for platform, branch_number in enumerate(taken):
                branch_values = returned[branch_number]
                value = branch_values[position] if position < len(branch_values) else None
                if value is None:
                    break
                values.append(value[platform])
            else:
                known[result] = tuple(values)
        if not any(branches[number] for number in set(taken)):
            return  # the index plumbing of lowering rules that differ per platform
        if len(set(taken)) == 1:
            items.extend(branches[taken[0]])
        else:
            items.append(_Switch(branches=tuple(branches), taken=taken))


_LOCATION_KINDS = {"CallSiteLoc": "callsite", "NameLoc": "name", "FileLineColLoc": "file"}


class _OneLocationClass(Protocol):
    """jaxlib 0.9's ``Location``: one class for every kind, which says its own."""

    def is_a_callsite(self) -> bool: ...
    def is_a_name(self) -> bool: ...
    def is_a_file(self) -> bool: ...


def _location_kind(location: ir.Location) -> str | None:
    """``"callsite"``, ``"name"``, ``"file"`` or ``None`` (another kind, or bindings that do
    not say). Up to jaxlib 0.9 one ``Location`` class answers ``is_a_callsite()`` and the
    like, and reading a part another kind has (``callee`` of a name) crashes the process;
    from 0.10 each kind is a class of its own."""
    try:
        if hasattr(location, "is_a_callsite"):
            old = cast("_OneLocationClass", location)
            if old.is_a_callsite():
                return "callsite"
            if old.is_a_name():
                return "name"
            return "file" if old.is_a_file() else None
        return _LOCATION_KINDS.get(type(location).__name__)
    except Exception:  # bindings without the predicates: the location's whole text instead
        return None


def _forward_known(operation: ir.Operation, known: _Known) -> None:
    """Make the known operands of a region-carrying op known inside its regions too.

    ``sdy.manual_computation`` (a ``shard_map`` body under Shardy) and
    ``sdy.named_computation`` are isolated from the values around them: the platform index
    reaches their ops as the block argument at its operand's position, and so does every
    other known operand. A ``stablehlo.while`` hands its operands to its regions the same
    way, but a carried value can change from one iteration to the next: only one the body
    returns unchanged (at the same position) is known inside.
    """
    operands = operation.operands
    if not any(operand in known for operand in operands):
        return
    regions = list(operation.regions)
    unchanged: set[int] | None = None
    if operation.name == "stablehlo.while" and len(regions) == 2:
        body = regions[1]
        arguments: Sequence[ir.Value[ir.Type]] = (
            list(body.blocks[0].arguments) if body.blocks else []
        )
        terminator = _terminator(body)
        returned = list(terminator.operands) if terminator is not None else []
        unchanged = {
            i for i, (argument, value) in enumerate(zip(arguments, returned, strict=False))
            if argument == value
        }  # fmt: skip
    for region in regions:
        if not region.blocks:
            continue
        arguments = region.blocks[0].arguments
        if len(arguments) != len(operands):
            continue  # not a region fed by the op's operands (a reducer's scalars, say)
        for i, (operand, argument) in enumerate(zip(operands, arguments, strict=True)):
            value = known.get(operand)
            if value is not None and (unchanged is None or i in unchanged):
                known[argument] = value


def _marked_index_arguments(func: ir.OpView) -> set[int]:
    """The positions of ``func``'s arguments marked as the platform index (functions lowered
    from a jaxpr mark it ``jax.global_constant``)."""
    if "arg_attrs" not in func.attributes:
        return set()
    attributes = cast("Iterable[ir.Attribute]", func.attributes["arg_attrs"])  # an ArrayAttr
    return {i for i, a in enumerate(attributes) if _PLATFORM_INDEX in str(a)}


def _per_platform(
    value: ir.Value[ir.Type],
    known: Mapping[ir.Value[ir.Type], tuple[int, ...]],
    index_free_call: Callable[[ir.Operation, Sequence[int]], bool] = lambda *_: False,
    depth: int = 8,
) -> bool:
    """Whether ``value`` is computed (within ``depth`` ops, through integer scalars) from a
    value that differs per platform: a case on it would take a different branch per platform,
    so counting all its branches for every platform would be wrong. The walk stops at array
    or floating-point values: a user's ``cond`` on data computed by a function that receives
    the platform index is not an index computation; nor does it go into the operands a call
    of an index-free function (``index_free_call``) hands on unused."""
    pending = [(value, 0)]
    seen: set[ir.Value[ir.Type]] = set()
    while pending:
        current, steps = pending.pop()
        found = known.get(current)
        if found is not None and len(set(found)) > 1:
            return True
        if steps >= depth or current in seen or not _INTEGER_SCALAR.fullmatch(str(current.type)):
            continue
        seen.add(current)
        owner = current.owner
        operation = getattr(owner, "operation", owner)
        operands = getattr(operation, "operands", None)
        if operands is not None:  # an op's result
            handed = [i for i, operand in enumerate(operands)
                      if len(set(known.get(operand, ()))) > 1]  # fmt: skip
            free = bool(handed) and index_free_call(cast("ir.Operation", operation), handed)
            pending.extend(
                (operand, steps + 1)
                for i, operand in enumerate(operands)
                if not (free and i in handed)
            )
            continue
        fed = _feeding_operand(current, cast("ir.Block", owner))  # an op's result has operands
        if fed is not None:  # a region's argument, fed by the operand of its op
            pending.append((fed, steps + 1))
    return False


def _feeding_operand(argument: ir.Value[ir.Type], block: ir.Block) -> ir.Value[ir.Type] | None:
    """The operand of the op around ``block`` that its argument ``argument`` receives (as in
    ``sdy.manual_computation`` or ``stablehlo.while``), else ``None``."""
    parent: ir.Operation | None = getattr(getattr(block, "owner", None), "operation", None)
    if parent is None or parent.name == "func.func":
        return None
    operands = list(parent.operands)
    arguments: list[ir.Value[ir.Type]] = list(block.arguments)
    if len(operands) != len(arguments) or argument not in arguments:
        return None
    return operands[arguments.index(argument)]


def _terminator(region: ir.Region) -> ir.Operation | None:
    for block in region.blocks:
        operations = list(block.operations)
        if operations:
            return operations[-1].operation
    return None


def _symbol(attribute: object) -> str:
    return str(attribute).strip('"').lstrip("@").strip('"')


@functools.lru_cache(maxsize=1024)
def _keeps_location(name: str) -> bool:
    """Whether ``read_program`` records the location of ``name`` ops.

    Only calls (their callees' ops inherit the call's line) and ops that can classify as
    something other than ``xla`` (custom calls, and ops a row of ``targets.RULES`` names)
    ever show a location in a census; for every other op ``str(operation.location)`` would be
    most of the cost of reading the module. A ``pytest_jaxport_classify`` hook that turns
    such an op into a kernel reports it at its caller's line (the line that called the
    function it is in; none at the top level).
    """
    from fnmatch import fnmatchcase

    if name in ("stablehlo.custom_call", "func.call", "call"):
        return True
    return any(
        not rule.custom_call and fnmatchcase(name, rule.pattern) for rule in CLASSIFICATION_RULES
    )


_ATTRIBUTES = {
    "stablehlo.dot_general": ("algorithm", "dot_dimension_numbers", "precision_config"),
    "stablehlo.convolution": ("dimension_numbers", "precision_config"),
}
"""The attributes a site keeps, per op: what ``op_cost`` (dimension numbers) and format
findings (precision, dot algorithm, convolution layout) read."""

_TYPED_FREE_OPS = frozenset({"stablehlo.bitcast_convert"})
"""Ops that cost nothing but whose types a format rule reads (a float64 bitcast does not
compile for TPU)."""

_NOT_FOLDED = frozenset(
    {
        "stablehlo.custom_call", "stablehlo.case", "stablehlo.if", "stablehlo.while",
        "stablehlo.iota", "stablehlo.rng", "stablehlo.rng_bit_generator",
        "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.all_to_all",
        "stablehlo.reduce_scatter", "stablehlo.collective_permute",
        "stablehlo.collective_broadcast", "stablehlo.infeed", "stablehlo.outfeed",
        "stablehlo.send", "stablehlo.recv", "stablehlo.after_all", "stablehlo.create_token",
        "stablehlo.partition_id", "stablehlo.replica_id", "stablehlo.optimization_barrier",
        "stablehlo.composite",
    }
)  # fmt: skip
"""StableHLO ops XLA's constant folding leaves alone, whatever their operands
(``HloConstantFolding``: side effects, random bits, custom calls, control flow; an iota has
no operand, and XLA does not fold what an iota feeds)."""

_FOLDED_ELEMENTS = 45_000_000
"""XLA folds no result (nor operands) larger than this many elements
(``HloConstantFolding``'s ``kMaximumConstantSizeElements``)."""

_SHAPE = re.compile(r"tensor<((?:\d+x)*)")


def _elements(type_text: str) -> int:
    """How many elements a ``tensor<2x3xf32>`` holds (1 for a scalar or another type)."""
    found = _SHAPE.match(type_text)
    if found is None or not found.group(1):
        return 1
    return math.prod(int(d) for d in found.group(1).split("x") if d)


_Typed = tuple[float, float, tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]
"""``(flops, bytes, operand types, result types, attributes)`` of one op."""
_UNTYPED: _Typed = (0.0, 0.0, (), (), ())


def _site_attributes(name: str, attributes: ir.OpAttributeMap) -> tuple[tuple[str, str], ...]:
    """The :data:`_ATTRIBUTES` of a ``name`` op, as hashable pairs."""
    return tuple((key, str(attributes[key])) for key in _ATTRIBUTES[name] if key in attributes)
