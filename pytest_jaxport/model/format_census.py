"""The formats-and-layout census of one program: every rule of
:mod:`pytest_jaxport.model.format_rules` at every op, weighted by how often the op runs and
grouped by the user's source line (:func:`take_format_census`).

It reads a census :class:`~pytest_jaxport.model.census.Program`: at the lowered level the
operand and result types of each op and the attributes of dots and convolutions
(``lowering.read_program`` keeps them); at the compiled level the transposes and copies XLA's
layout assignment put around library calls (``hlo.parse_compiled_hlo`` counts them) and the
layouts the compiler chose. No jax, no pytest.

Example::

    >>> dot = OpSite(op="stablehlo.dot_general", location='loc("model.py":3:4)',
    ...              operand_types=("tensor<4096x100xf32>", "tensor<100x128xf32>"),
    ...              result_types=("tensor<4096x128xf32>",))
    >>> census = take_format_census(Program(entry="main", functions={"main": (dot,)}), "tpu")
    >>> [f.rule for f in census.findings]
    ['float32-default-precision', 'matrix-unit-misaligned', 'tile-padding']
    >>> str(census.findings[0].location)
    'model.py:3'
    >>> round(census.padding_waste, 4)  # 100 rows pad to 104 of the 4096 lanes: 4% of x
    0.0172

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from pytest_jaxport.model.census import (
    CALL_OPS,
    UNCOUNTED_OPS,
    OpSite,
    Program,
    SourceLocation,
    census_op,
    dot_dimensions,
    innermost_frame,
    placed_location,
    tensor_type,
)
from pytest_jaxport.model.classification import Level, classify
from pytest_jaxport.model.devices import DEFAULT_DEVICES, Device
from pytest_jaxport.model.dtypes import dtype_name, element_bits, hlo_element, jax_name
from pytest_jaxport.model.findings import (
    Finding,
    FormatCensus,
    finding_order,
    kept_lines,
    memory_footprint,
    size_text,
)
from pytest_jaxport.model.format_rules import (
    MATMUL_OPS,
    TENSOR_CORE_DEVICES,
    XMX_ELEMENTS,
    FormatRule,
    rules_for,
)
from pytest_jaxport.model.geometry import (
    convolution_labels,
    convolution_relayout,
    matrix_unit_waste,
    padded_to,
)
from pytest_jaxport.model.tiling import TiledLayout, default_layout, read_layouts

LARGE_ARRAY_BYTES = 64 * 1024
"""Arrays smaller than this (64 KiB, 16 float32 tiles of (8, 128)) are left out of the
padding and matrix-unit numbers: their waste is a large fraction of nothing, and the toy
shapes of a unit test say nothing about production shapes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Hit:
    """What one rule found at one op, before weighting and grouping by line."""

    rule: FormatRule
    detail: str
    formats: tuple[str, ...] = ()
    amount: float = 0.0
    of: float = 0.0
    unit: str = ""
    ops: int = 1
    """How many ops the finding is at this site: the relayouts around a compiled library
    call (each a transpose or copy), one otherwise."""


_Types = tuple[tuple[tuple[int, ...] | None, str], ...]


@functools.lru_cache(maxsize=8192)
def _parsed(types: tuple[str, ...]) -> _Types:
    """Each ranked tensor type of ``types`` as ``(dims, element)``; a program repeats a few
    signatures many times (cached)."""
    return tuple(t for t in map(tensor_type, types) if t is not None)


def _short(dims: tuple[int, ...] | None, element: str) -> str:
    shape = "?" if dims is None else ",".join(map(str, dims))
    return f"{dtype_name(element)}[{shape}]"


def _op_name(op: str) -> str:
    return op.rsplit(".", 1)[-1]


def _default_precision(attributes: Mapping[str, str]) -> bool:
    """No ``precision=`` other than DEFAULT and no dot algorithm: what the platform decides."""
    if "algorithm" in attributes:
        return False
    config = attributes.get("precision_config", "")
    return all(p == "DEFAULT" for p in re.findall(r"precision (\w+)", config))


@functools.lru_cache(maxsize=16384)
def _cached_hits(site: OpSite, platform: str, device: Device, large_bytes: int) -> tuple[_Hit, ...]:
    """:func:`site_hits` of a site without location or count: a suite's checks repeat the
    same op signatures (the rules are data, fixed for the process)."""
    return site_hits(site, platform, device, large_bytes=large_bytes)


def site_hits(
    site: OpSite, platform: str, device: Device, *, large_bytes: int = LARGE_ARRAY_BYTES
) -> tuple[_Hit, ...]:
    """Every rule's finding at one op site (before call weighting). A compiled program's
    site has the findings the compiler's own output shows: the relayouts it inserted around a
    library call and the padding of the layouts it chose; the rules about formats and
    matrix units are the lowered level's."""
    if site.compiled:
        return _compiled_hits(site, rules_for(platform, device), large_bytes)
    operands = _parsed(site.operand_types)
    results = _parsed(site.result_types)
    if not operands and not results:
        return ()
    inputs = {element for _, element in operands}
    elements = inputs | {element for _, element in results}
    attributes = dict(site.attributes)
    hits: list[_Hit] = []
    relayout_decided = False
    op = census_op(site, platform)  # a dot XLA makes elementwise is no matrix unit's
    for rule in rules_for(platform, device):
        if not any(fnmatchcase(op, pattern) for pattern in rule.ops):
            continue
        if rule.targets and not any(fnmatchcase(site.target or "", t) for t in rule.targets):
            continue
        if rule.elements and not rule.elements & (inputs if rule.ops == MATMUL_OPS else elements):
            continue
        if rule.precision == "default" and not _default_precision(attributes):
            continue
        hit: _Hit | None = None
        if rule.kind == "format":
            if not rule.compiles or not any(not h.rule.compiles for h in hits):
                found = inputs if rule.ops == MATMUL_OPS else elements
                hit = _format_hit(rule, site, operands, found)  # one finding per op that
                # does not compile: its emulation is moot
        elif rule.name == "tile-padding":
            hit = _padding_hit(rule, _layouts(site), large_bytes)
        elif rule.name == "matrix-unit-misaligned":
            hit = _alignment_hit(rule, site, operands, attributes, device, large_bytes)
        elif rule.name == "convolution-relayout" and not relayout_decided:
            if rule.ranks and not (operands and len(operands[0][0] or ()) in rule.ranks):
                continue
            relayout_decided = True  # the first row that applies decides
            hit = _convolution_hit(rule, attributes)
        elif rule.name == "dot-relayout":
            hit = _dot_relayout_hit(rule, operands, attributes)
        if hit is not None:
            hits.append(hit)
    return tuple(hits)


def _compiled_hits(site: OpSite, rules: Sequence[FormatRule], large_bytes: int) -> tuple[_Hit, ...]:
    hits: list[_Hit] = []
    relayouts = _compiled_relayouts(site) if site.attributes else None
    for rule in rules:
        if rule.name == "inserted-relayout" and relayouts is not None:
            count, kernels, written, moved = relayouts
            call = site.target or site.op.removeprefix("hlo.fusion:")
            detail = (
                f"{count} transposes/copies ({kernels} kernels of their own, "
                f"{size_text(written)}) around {call}"
            )
            hits.append(_Hit(rule=rule, detail=detail, amount=written, of=moved + written,
                             unit="bytes", ops=count))  # fmt: skip
        elif rule.name == "tile-padding" and (site.operand_types or site.result_types):
            hit = _padding_hit(rule, _layouts(site), large_bytes)
            if hit is not None:
                hits.append(hit)
    return tuple(hits)


def _format_hit(rule: FormatRule, site: OpSite, operands: _Types, elements: set[str]) -> _Hit:
    found = tuple(sorted(dtype_name(e) for e in elements & rule.elements))
    types = " x ".join(_short(dims, element) for dims, element in operands)
    op = f"{_op_name(site.op)} {site.target}" if rule.targets and site.target else _op_name(site.op)
    detail = f"{', '.join(found)} {op}" + (f" ({types})" if types else "")
    if rule.release_text:
        detail += f" [{rule.release_text}]"
    return _Hit(rule=rule, formats=found, detail=detail)


def _convolution_hit(rule: FormatRule, attributes: Mapping[str, str]) -> _Hit | None:
    labels = convolution_labels(attributes.get("dimension_numbers", ""))
    moved = convolution_relayout(labels, rule.layout) if labels else ()
    if not labels or not moved:
        return None
    numbers = "x".join("[" + ", ".join(part) + "]" for part in labels[:2])
    wanted = rule.layout.rstrip("/")
    return _Hit(rule=rule, detail=f"{numbers}: {', '.join(moved)} relaid out to {wanted}")


def _tiled_bytes(site: OpSite, large_bytes: int) -> int:
    """The bytes ``site``'s large tiled arrays take in TPU tiles, padded or not: what the
    padding share is a share of."""
    return _padding(_layouts(site), large_bytes)[1]


def _layouts(site: OpSite) -> tuple[TiledLayout, ...]:
    """The arrays ``site`` reads and writes as the TPU lays them out: a compiled program's
    as the compiler printed them, a lowered program's in the layout the compiler gives an
    array nothing constrains (:func:`~pytest_jaxport.model.tiling.default_layout`)."""
    types = (*site.operand_types, *site.result_types)
    if site.compiled:
        return tuple(layout for text in types for layout in read_layouts(text) if layout.tiled)
    return _modelled(types)


@functools.lru_cache(maxsize=8192)
def _modelled(types: tuple[str, ...]) -> tuple[TiledLayout, ...]:
    return tuple(
        default_layout(dims, hlo_element(element))
        for dims, element in _parsed(types)
        if dims  # a scalar is not tiled here; a dynamic shape has no layout yet
    )


def _padding(arrays: Sequence[TiledLayout], large_bytes: int) -> tuple[int, int, tuple[int, str]]:
    """``(padding bytes, tiled bytes, (the largest padding, what it pads))`` of the large
    tiled arrays among ``arrays``."""
    padding = 0
    padded_total = 0
    worst: tuple[int, str] = (0, "")
    for layout in arrays:
        if not layout.tiled or layout.data_bytes < large_bytes:
            continue
        padding += layout.padding
        padded_total += layout.bytes
        if layout.padding > worst[0]:
            worst = (layout.padding, _layout_detail(layout))
    return padding, padded_total, worst


def _layout_detail(layout: TiledLayout) -> str:
    """``float32[4096,100] as {0,1:T(8,128)}: 104x4096``: the array, its layout and the
    dimensions it takes, major to minor, padded."""
    shape = ",".join(map(str, layout.dims))
    taken = "x".join(map(str, layout.physical_dims))
    return f"{jax_name(layout.element)}[{shape}] as {layout.layout_text}: {taken}"


def _padding_hit(rule: FormatRule, arrays: Sequence[TiledLayout], large_bytes: int) -> _Hit | None:
    padding, padded_total, worst = _padding(arrays, large_bytes)
    if padding == 0:
        return None
    return _Hit(rule=rule, detail=worst[1], amount=float(padding), of=float(padded_total),
                unit="bytes")  # fmt: skip


def _matmul_sizes(
    site: OpSite, operands: _Types, attributes: Mapping[str, str]
) -> tuple[int, int, int, int, str] | None:
    """``(batch x rows, contracting, output features, bits, element)`` of a dot or
    convolution (a convolution contracts over its input features per window position)."""
    if len(operands) < 2:
        return None
    (lhs, element), (rhs, _) = operands[0], operands[1]
    if lhs is None or rhs is None:
        return None
    if site.op == "stablehlo.convolution":
        labels = convolution_labels(attributes.get("dimension_numbers", ""))
        if labels is None or len(labels[1]) != len(rhs) or len(labels[0]) != len(lhs):
            return None
        source, kernel, _ = labels
        k = rhs[kernel.index("i")]
        n = rhs[kernel.index("o")]
        m = math.prod(d for d, label in zip(lhs, source, strict=True) if label != "f")
        return m, k, n, element_bits(element), element
    dims = dot_dimensions(attributes.get("dot_dimension_numbers", ""))
    if site.op == "stablehlo.dot" or not attributes.get("dot_dimension_numbers"):
        dims["lhs_contracting"] = (len(lhs) - 1,)
        dims["rhs_contracting"] = (0,)
    k = math.prod(lhs[d] for d in dims["lhs_contracting"] if d < len(lhs))
    used_rhs = set(dims["rhs_contracting"]) | set(dims["rhs_batching"])
    n = math.prod(d for i, d in enumerate(rhs) if i not in used_rhs)
    m = math.prod(d for i, d in enumerate(lhs) if i not in set(dims["lhs_contracting"]))
    return m, k, n, element_bits(element), element


def _alignment_hit(
    rule: FormatRule,
    site: OpSite,
    operands: _Types,
    attributes: Mapping[str, str],
    device: Device,
    large_bytes: int,
) -> _Hit | None:
    sizes = _matmul_sizes(site, operands, attributes)
    if sizes is None:
        return None
    m, k, n, bits, element = sizes
    if not any(dims is not None and math.prod(dims) * element_bits(e) // 8 >= large_bytes
               for dims, e in operands):  # fmt: skip
        return None
    if rule.platform == "tpu":
        k_unit = n_unit = rule.unit
        m_unit = 1  # rows stream through the systolic array
        unit_text = f"a {rule.unit}x{rule.unit} MXU"
    elif rule.platform == "oneapi":
        if element not in XMX_ELEMENTS:
            return None  # float32 stays off XMX at oneDNN's default (strict) math mode
        k_unit = max(rule.unit * 8 // bits, 1)
        n_unit = 16  # XMX tiles are 16 wide (N) and up to 8 deep in rows (M)
        m_unit = 8
        unit_text = f"XMX tiles ({m_unit}x{k_unit}x{n_unit})"
    else:
        if (
            element not in TENSOR_CORE_DEVICES
            or device.generation not in TENSOR_CORE_DEVICES[element]
        ):
            return None  # no tensor cores for this type here: nothing to align to
        if element == "f32" and not _default_precision(attributes):
            return None  # full float32 (precision='highest'): no tensor cores
        k_unit = n_unit = m_unit = max(rule.unit * 8 // bits, 1)
        unit_text = f"tensor cores (multiples of {k_unit})"
    waste = matrix_unit_waste(m, k, n, k_unit=k_unit, n_unit=n_unit, m_unit=m_unit)
    if waste <= 0.0:
        return None
    padded = float(2 * padded_to(m, m_unit) * padded_to(k, k_unit) * padded_to(n, n_unit))
    return _Hit(
        rule=rule,
        detail=f"{_op_name(site.op)} contracting {k}, features {n} on {unit_text}: "
        f"{waste:.0%} idle",
        amount=padded * waste,
        of=padded,
        unit="flops",
    )


def _dot_relayout_hit(
    rule: FormatRule, operands: _Types, attributes: Mapping[str, str]
) -> _Hit | None:
    if len(operands) < 2:
        return None
    dims = dot_dimensions(attributes.get("dot_dimension_numbers", ""))
    moved = []
    for side, (shape, _) in zip(("lhs", "rhs"), operands[:2], strict=False):
        contracting = dims[f"{side}_contracting"]
        if shape is None or not contracting:
            continue
        if max(contracting) != len(shape) - 1:
            moved.append(side)
    if not moved:
        return None
    return _Hit(rule=rule, detail=f"dot_general: {' and '.join(moved)} transposed to put the "
                "contracting dimension minor")  # fmt: skip


def _compiled_relayouts(site: OpSite) -> tuple[int, int, float, float] | None:
    """``(relayouts, of which kernels of their own, bytes they write, bytes the call
    moves)`` a compiled library call's site carries (``hlo.parse_compiled_hlo``)."""
    attributes = dict(site.attributes)
    raw = attributes.get("relayouts")
    if raw is None:
        return None
    try:
        kernels = int(attributes.get("relayout_kernels", "0"))
        return int(raw), kernels, float(attributes.get("relayout_bytes", "0")), site.bytes
    except ValueError:
        return None


def site_formats(site: OpSite) -> frozenset[str]:
    """The formats (JAX names) an op's operands and results use."""
    return _formats_of((*site.operand_types, *site.result_types))


@functools.lru_cache(maxsize=8192)
def _formats_of(types: tuple[str, ...]) -> frozenset[str]:
    return frozenset(dtype_name(e) for _, e in _parsed(types))


# -- the walk -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    """One (rule, line)'s findings so far."""

    hit: _Hit
    count: int = 0
    amount: float = 0.0
    of: float = 0.0
    ops: set[str] = field(default_factory=set)
    formats: set[str] = field(default_factory=set)

    def add(self, other: _Tally, calls: int, runs: int) -> None:
        self.count += other.count * calls
        self.amount += other.amount * runs
        self.of += other.of * runs
        self.ops |= other.ops
        self.formats |= other.formats
        if other.hit.amount > self.hit.amount:
            self.hit = other.hit


_Line = tuple[str, "SourceLocation | None"]
_Result = tuple[dict[_Line, _Tally], Counter[str], float, dict[str, tuple[SourceLocation, ...]]]
"""A function's findings per line, formats, tiled bytes and lines per format."""
"""A function's findings by line, its formats, and its tiled bytes (run-weighted)."""


@dataclass(slots=True)
class _Walk:
    program: Program
    platform: str
    device: Device
    large_bytes: int
    own: tuple[str, ...] = ()
    """Installed packages whose lines count as the user's (``[tool.jaxport] own_packages``)."""
    tiling: bool = False
    """Whether the device tiles arrays (a ``tile-padding`` rule applies): then every op's
    tiled bytes are summed, the padding share's denominator."""
    memo: dict[tuple[str, SourceLocation | None, tuple[str, str] | None], _Result] = field(
        default_factory=dict
    )
    tiles: dict[OpSite, int] = field(default_factory=dict)
    hits: dict[OpSite, tuple[_Hit, ...]] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)

    def site(self, site: OpSite) -> tuple[_Hit, ...]:
        key = OpSite(op=site.op, target=site.target, bytes=site.bytes,
                     operand_types=site.operand_types, result_types=site.result_types,
                     attributes=site.attributes)  # fmt: skip
        found = self.hits.get(key)
        if found is None:
            found = self.hits[key] = _cached_hits(key, self.platform, self.device, self.large_bytes)
        return found

    def tiled(self, site: OpSite) -> int:
        key = OpSite(op=site.op, operand_types=site.operand_types, result_types=site.result_types)
        found = self.tiles.get(key)
        if found is None:
            found = self.tiles[key] = _tiled_bytes(key, self.large_bytes)
        return found

    def function(
        self, name: str, inherited: SourceLocation | None, entry: tuple[str, str] | None = None
    ) -> _Result:
        """Function ``name``'s findings, called at ``inherited`` through a call op entering
        it at ``entry``: each at the line the census shows (``census.placed_location``)."""
        key = (name, inherited, entry)
        if key in self.memo:
            return self.memo[key]
        tallies: dict[_Line, _Tally] = {}
        formats: Counter[str] = Counter()
        tiled = 0.0
        lines: dict[str, tuple[SourceLocation, ...]] = {}
        if name in self.active:  # StableHLO forbids recursion; never loop on a malformed module
            return tallies, formats, tiled, lines
        self.active.add(name)
        for site, repeats in Counter(self.program.functions.get(name, ())).items():
            n = site.count * repeats
            location = placed_location(site.location, inherited, entry, self.own)
            if site.op in CALL_OPS and site.target is not None:
                callee, callee_formats, callee_tiled, callee_lines = self.function(
                    site.target, location, innermost_frame(site.location)
                )
                for line, tally in callee.items():
                    _merge(tallies, line, tally, n, n * site.runs)
                formats.update({k: v * n for k, v in callee_formats.items()})
                tiled += callee_tiled * n * site.runs
                for found, at in callee_lines.items():
                    lines[found] = kept_lines((*lines.get(found, ()), *at))
                continue
            if site.op in UNCOUNTED_OPS or _is_meta(self.platform, site):
                continue
            for found in site_formats(site):
                formats[found] += n
                had = lines.get(found, ())
                if location is not None and location not in had:
                    lines[found] = kept_lines((*had, location))
            if self.tiling:
                tiled += self.tiled(site) * n
            op = _op_name(site.target or site.op)
            for hit in self.site(site):
                one = _Tally(hit=hit, count=hit.ops, amount=hit.amount, of=hit.of, ops={op},
                             formats=set(hit.formats))  # fmt: skip
                _merge(tallies, (hit.rule.name, location), one, n, n)
        self.active.discard(name)
        self.memo[key] = (tallies, formats, tiled, lines)
        return tallies, formats, tiled, lines


def _is_meta(platform: str, site: OpSite) -> bool:
    """A custom call that computes nothing on the device (a host callback, a sharding
    annotation): its operands' formats are not the target's to compute."""
    if not site.op.endswith("custom_call") or site.target is None:
        return False
    return _meta_target(platform, site.target)


@functools.lru_cache(maxsize=4096)
def _meta_target(platform: str, target: str) -> bool:
    return classify(platform, "stablehlo.custom_call", target).layer == "meta"


def _merged_detail(tally: _Tally) -> str:
    """A line's detail: its one op's, or for a format at several kinds of op, which."""
    if tally.hit.rule.kind != "format" or len(tally.ops) < 2:
        return tally.hit.detail
    return f"{', '.join(sorted(tally.formats))} in {', '.join(sorted(tally.ops))}"


def _merge(tallies: dict[_Line, _Tally], line: _Line, tally: _Tally, calls: int, runs: int) -> None:
    found = tallies.get(line)
    if found is None:
        found = tallies[line] = _Tally(hit=tally.hit)
    found.add(tally, calls, runs)


def take_format_census(
    program: Program,
    platform: str,
    *,
    device: Device | None = None,
    level: Level = "lowered",
    large_bytes: int = LARGE_ARRAY_BYTES,
    own: tuple[str, ...] = (),
) -> FormatCensus:
    """The formats-and-layout findings of ``program`` on ``platform`` for ``device`` (the
    platform's :data:`DEFAULT_DEVICES` entry where ``None``), one per rule and source line;
    ``own``: installed packages whose lines are the user's, as in a census.

    Counts are call-weighted like the census's (a function called three times counts three
    times; a loop body once); padding and relayout bytes and idle matrix-unit work are
    weighted by how often the ops run (known trip counts of compiled loops included). Ops
    without a location of their own are attributed to the line that called their function.
    """
    judged = device or DEFAULT_DEVICES.get(platform, Device(platform=platform))
    tiling = any(r.name == "tile-padding" for r in rules_for(platform, judged))
    walk = _Walk(program=program, platform=platform, device=judged, large_bytes=large_bytes,
                 own=own, tiling=tiling)  # fmt: skip
    tallies, formats, tiled, lines = walk.function(program.entry, None)
    findings = tuple(
        sorted(
            (
                Finding(
                    kind=tally.hit.rule.kind,
                    rule=rule,
                    platform=platform,
                    level=level,
                    location=location,
                    count=tally.count,
                    effect=tally.hit.rule.effect,
                    formats=tuple(sorted(tally.formats)),
                    ops=tuple(sorted(tally.ops)),
                    detail=detail,
                    compiles=tally.hit.rule.compiles,
                    amount=tally.amount,
                    of=tally.of,
                    unit=tally.hit.unit,
                )
                for (rule, location), tally in tallies.items()
                for detail in (_merged_detail(tally),)
            ),
            key=finding_order,
        )
    )
    return FormatCensus(
        platform=platform,
        device=judged,
        level=level,
        findings=findings,
        formats=dict(sorted(formats.items())),
        tiled_bytes=tiled,
        lines=dict(sorted(lines.items())),
        memory=memory_footprint(program) if level == "compiled" else None,
    )
