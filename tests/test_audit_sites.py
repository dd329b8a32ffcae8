"""Tests of pytest_jaxport.recorder and examine.placement: an audit's sites at lines.

Every site an audit finds is placed at a line (issue 43, item 3).

TPU pads the last two dimensions of an array to its tiles: a 3-channel image warped with
``jax.scipy.ndimage.map_coordinates`` inside the suite's own jitted function is padded by ops
whose lines the lowered reader does not keep. Such a finding is placed at the computation's
own line (the jitted function's definition), as a kernel of the user's is; never
``(no source line)``. Real JAX, a real suite through pytester.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # an audited suite through pytester

WARP = """
import jax
import jax.numpy as jnp
from jax.scipy.ndimage import map_coordinates


@jax.jit
def warp(image, shift):
    rows, cols = jnp.meshgrid(jnp.arange(131.0), jnp.arange(111.0), indexing="ij")
    channels = [
        map_coordinates(image[..., c], [rows + shift, cols - shift], order=1)
        for c in range(3)
    ]
    return jnp.stack(channels, axis=-1)


def test_warp():
    assert warp(jnp.ones((131, 111, 3)), 0.5).shape == (131, 111, 3)
"""


def test_tpu_tile_padding_inside_a_jitted_function_is_placed_at_the_users_line(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "tpu"]\n')
    pytester.makepyfile(test_warp=WARP)
    result = pytester.runpytest("--jaxport-audit", "--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    audit = json.loads((pytester.path / "r.json").read_text())["audit"]
    (warp,) = [c for c in audit["computations"] if c["function"] == "warp"]
    assert warp["source"] == "test_warp.py:6"  # (its decorator's line, as JAX records it)
    findings = warp["platforms"]["tpu"]["lowered"]["formats"]["findings"]
    padding = [f for f in findings if f["rule"] == "tile-padding"]
    assert padding
    assert all(f["location"] for f in findings), findings
    assert "test_warp.py:6" in {f["location"] for f in padding}  # where no op kept its line
    assert all(f["location"].startswith("test_warp.py:") for f in padding)
