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
