"""The judging of a check (``model/evaluation.py``): what a violation says of what it found."""

from __future__ import annotations

import numpy as np

from pytest_jaxport.model.budget import Budget
from pytest_jaxport.model.census import Census
from pytest_jaxport.model.compare import Leaf, Outputs, compare
from pytest_jaxport.model.evaluation import evaluate
from pytest_jaxport.model.numerics import Tolerance
from pytest_jaxport.model.probe import PlatformProbe, Probe


def _outputs(values: list[float]) -> Outputs:
    return Outputs(structure="*", leaves=(Leaf(path="", array=np.float32(values)),))


def test_a_mismatch_says_which_error_is_the_largest_and_which_element_is_furthest_out() -> None:
    """Issue 55, item 3: the header said ``worst abs err 3.0e-01, rel err 3.5e+00`` and the
    leaf ``worst at index (11, 3) ... abs err 2.3e-01``: three "worst"s, two elements. The
    header's are the largest errors, each over every element; the leaf's element is the one
    furthest beyond the tolerance; each says so."""
    # element 0: the largest abs err (0.3 of 1000: within rtol=1e-3 x 1000 + atol=1e-3);
    # element 1: the largest rel err (0.0035 of 0.001: 3.5, beyond); element 2: furthest out.
    reference = _outputs([1000.0, 0.001, 1.0])
    candidate = _outputs([1000.3, 0.0045, 1.23])
    comparison = compare(reference, candidate, reference_platform="cpu", platform="cuda",
                         tolerance=lambda dtype: Tolerance(rtol=1e-3, atol=1e-3))  # fmt: skip
    probe = Probe(name="f", reference="cpu", platforms={
        "cpu": PlatformProbe(platform="cpu", present=True, census=Census(platform="cpu")),
        "cuda": PlatformProbe(platform="cuda", present=True, census=Census(platform="cuda"),
                              executed=True, numerics=comparison),
    })  # fmt: skip
    [violation] = evaluate(probe, lambda p: Budget(platform=p))
    assert violation.found_text() == (
        "1 differing leaf (largest abs err 3.0e-01, largest rel err 3.5e+00)"
    )
    [detail] = violation.details
    assert "2 of 3 elements differ beyond rtol=0.001, atol=0.001 (float32)" in detail
    assert "; furthest beyond the tolerance at index (2,): cpu=1.0 cuda=1.23, abs err 2.3e-01" in (
        detail
    )
