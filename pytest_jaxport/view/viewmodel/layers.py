"""The layer table: the suite's portability, layer by layer (pure).

:func:`layers_of` reads the view (:class:`~pytest_jaxport.view.viewmodel.reportview.ReportView`)
into a row per layer of :data:`LAYER_ROWS`, from JAX Python code to tooling assumptions: the
table a team shows when asked how locked in it is. :func:`formats_value` is the numeric
formats and memory layout row, per platform and the device its findings were judged for.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from pytest_jaxport.model.findings import FINDING_KINDS
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.platforms import PLATFORM_VENDORS
from pytest_jaxport.report.document import Config
from pytest_jaxport.report.totals import PlatformTotals, Tooling
from pytest_jaxport.view.formatting import number, pct, plural
from pytest_jaxport.view.viewmodel.details import padding_text
from pytest_jaxport.view.viewmodel.reportview import LayerRow, ReportView
from pytest_jaxport.view.viewmodel.totals import NOT_COMPILED_LEVEL, totals_level

LAYER_ROWS = (
    ("JAX Python code (jit, grad, vmap)", "in principle", "checks that lower on every target"),
    ("XLA-generated kernels", "regenerated per backend, performance not guaranteed",
     "xla share and counts"),
    ("vendor-library calls", "{home}-bound, counterpart usually exists",
     "vendor share and counts by library"),
    ("hand-written kernels and custom calls", "{home}-bound, each a rewrite",
     "kernels to rewrite per target"),
    ("numeric formats and memory layout", "lowers everywhere, computes or costs differently",
     "format and layout findings per platform and device"),
    ("profiling, tooling and CI assumptions", "often NVIDIA-bound",
     "NVIDIA-bound assumptions in the project"),
)  # fmt: skip


def layers_of(
    view: ReportView, platforms: Mapping[str, PlatformTotals], tooling: Tooling | None
) -> tuple[LayerRow, ...]:
    """The suite's portability, layer by layer: the table a team shows when asked how
    locked in it is."""
    checks = [c for t in view.tests for c in t.checks]
    everywhere = sum(1 for c in checks if c.cells and all(x.lowers for x in c.cells.values()))
    untraced = sum(1 for c in checks if c.probe.untraced is not None)
    counted = len(checks)
    if view.audit is not None and view.unit == "computation":
        everywhere = view.audit.lowers_everywhere
        counted = view.audit.seen["computations"]
    home = view.headline.home
    bound = PLATFORM_VENDORS.get(home, home).removeprefix("the ")  # NVIDIA for cuda

    def shares(layer: str) -> str:
        return ", ".join(f"{s.platform} {pct(s.layers[layer])} ({s.basis})" for s in view.shares)

    # a platform none of whose compiles gave a program has no count at either level
    uncounted = {p for p, t in platforms.items() if totals_level(t) == NOT_COMPILED_LEVEL}
    xla = ", ".join(
        f"{p} {NOT_COMPILED_LEVEL if p in uncounted else number(t.xla or 0)}"
        for p, t in platforms.items()
    )
    vendor = "; ".join(
        f"{p} {NOT_COMPILED_LEVEL}"
        if p in uncounted
        else f"{p} {number(t.vendor)} calls at {plural(t.vendor_sites or 0, 'site')}"
        for p, t in platforms.items()
    )
    custom = ", ".join(
        f"{p} {NOT_COMPILED_LEVEL if p in uncounted else number(t.custom)}"
        for p, t in platforms.items()
    )
    rewrite = ", ".join(
        f"{t.target}: {number(t.kernels)} to rewrite"
        if t.kernels is not None
        else f"{t.target}: {t.uncounted()}"
        for t in view.targets
        if t.kernels is not None or t.not_lowered
    )
    if not rewrite:
        lowered = platforms[home].lowered if home in platforms else 0
        rewrite = "not computed in this report" if lowered else f"no {home} census"
    values = [
        f"{number(everywhere)} of {plural(counted, view.unit)} "
        f"lower{'s' if everywhere == 1 else ''} on every configured platform"
        + (f" ({number(untraced)} could not be traced here)" if untraced else ""),
        "; ".join(x for x in (f"ops: {xla}" if xla else "", shares("xla")) if x),
        "; ".join(x for x in (vendor, shares("vendor")) if x),
        rewrite + (f"; custom calls: {custom}" if custom else ""),
        formats_value(platforms, view.hotspots, view.devices),
        (f"{number(len(view.tooling))} found in {number(tooling.files_read)} files read"
         if tooling is not None else "not scanned"),
    ]  # fmt: skip
    # "counterpart usually exists" says which have none where some do: the rewrite table lists
    # them as vendor gaps, "no counterpart" (issue 55 read both side by side).
    gaps = {(i.name, i.location) for t in view.targets for i in t.items
            if i.status == "vendor-gap"}  # fmt: skip
    return tuple(
        LayerRow(layer=layer, portable=_portable(layer, portable.format(home=bound), len(gaps)),
                 counted=counted, value=value)
        for (layer, portable, counted), value in zip(LAYER_ROWS, values, strict=True)
    )  # fmt: skip


VENDOR_LAYER = LAYER_ROWS[2][0]


def _portable(layer: str, said: str, gaps: int) -> str:
    """A layer's portability, the vendor layer's with its vendor gaps where it has some."""
    if layer != VENDOR_LAYER or not gaps:
        return said
    return f"{said} (none for {plural(gaps, 'vendor gap')})"


def formats_value(
    platforms: Mapping[str, PlatformTotals],
    sites: Sequence[Hotspot],
    devices: Mapping[str, str],
) -> str:
    """The formats-and-layout layer's value: per platform (and the device judged for) its
    findings by rule, which of them do not compile, the padding and the relayouts:
    ``tpu (TPU v5e): 14 format findings (float64-emulated 12, ...), padding 10.9% of bytes
    moved; cuda (H100 80GB HBM3): 6 format findings (...); none on cpu, rocm (MI300X)``."""
    parts = []
    clean = []
    for platform, totals in platforms.items():
        if totals.format_findings is None:
            continue
        said = []
        for kind in FINDING_KINDS:
            found = Counter[str]()
            stuck: set[str] = set()
            for site in sites:
                if site.platform == platform and site.layer == kind:
                    found[site.name] += site.dispatches
                    if site.kind == "not-compiled":
                        stuck.add(site.name)
            total = getattr(totals, f"{kind}_findings") or 0
            if total:
                rules = ", ".join(
                    f"{rule} {number(n)}" + (" does not compile" if rule in stuck else "")
                    for rule, n in found.most_common()
                )
                said.append(plural(total, f"{kind} finding") + (f" ({rules})" if rules else ""))
        if totals.padding_waste or totals.compiled_padding_waste is not None:
            said.append(padding_text(totals.padding_waste, totals.compiled_padding_waste))
        if totals.relayouts:
            said.append(f"{plural(totals.relayouts, 'relayout')} (compiled)")
        device = f" ({devices[platform]})" if devices.get(platform) else ""
        if said:
            parts.append(f"{platform}{device}: {', '.join(said)}")
        else:
            clean.append(f"{platform}{device}")
    if clean:
        parts.append(f"none on {', '.join(clean)}")
    return "; ".join(parts) or "not judged (a report without format and layout findings)"


def devices_of(config: Config) -> dict[str, str]:
    """The device each platform's findings were judged for, as the layer table names it:
    ``H100 80GB HBM3``, ``MI300X``, ``TPU v5e`` (its generation where it has no name)."""
    return {
        platform: device.name.removeprefix("NVIDIA ").removeprefix("AMD ") or device.generation
        for platform, device in (config.devices or {}).items()
    }
