"""The classification table (``model/classification.py``): what it knows of counterparts."""

from __future__ import annotations

from pytest_jaxport.model.classification import CLASSIFICATION_RULES, COUNTERPART_KINDS

PRICED_AS_GAPS = frozenset({"attention", "normalization", "dnn", "fusion"})
"""The vendor kinds a move prices as a vendor gap: cuDNN's fused attention and normalization,
a DNN library's fusions and its other calls (issue 55 decided each of the others)."""


def test_every_vendor_kind_is_decided_a_counterpart_or_a_gap() -> None:
    """A new vendor kind in the table is a decision: a counterpart on the other platforms
    (no price), or a gap (5 days each). Issue 55: libtpu's eigh and LU were gaps by default."""
    kinds = {r.result.kind for r in CLASSIFICATION_RULES if r.result.layer == "vendor"}
    assert kinds - PRICED_AS_GAPS == set(COUNTERPART_KINDS)
    assert not PRICED_AS_GAPS & set(COUNTERPART_KINDS)
    libtpu = {r.result.kind for r in CLASSIFICATION_RULES if r.result.library == "libtpu"}
    assert libtpu <= set(COUNTERPART_KINDS)  # the TPU runtime's routines


def test_the_reference_lists_every_library_a_budget_can_name() -> None:
    """Issue 55, item 12: ``max_library_calls = { libtpu = 0 }`` works, but docs/reference.md's
    list of libraries left libtpu out (and oneapi's onemkl and oneccl)."""
    import re
    from pathlib import Path

    from pytest_jaxport.model.classification import all_libraries

    reference = (Path(__file__).parents[1] / "docs" / "reference.md").read_text()
    [row] = [line for line in reference.splitlines() if line.startswith("| `max_library_calls`")]
    listed = re.findall(r"`([a-z0-9]+)`", row.split("Libraries:", 1)[1])
    assert sorted(listed) == sorted(all_libraries())
