"""Tests of pytest_jaxport.model.census across JAX releases (tests/parity_corpus.py).

Census parity across JAX releases: this JAX's census of the corpus is the recorded one.

``tests/data/census_parity.json`` records each case's census per platform on the floor
release and every change a later release brought, with why; ``tests/parity_corpus.py`` says
how to record a release. A release that changes a census without an entry fails here, and
every entry must say why and be listed in ``docs/compatibility.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jax
import pytest
from parity_corpus import (
    PLATFORMS,
    changes,
    corpus,
    current,
    expected,
    load,
    release,
)

from pytest_jaxport._jax.adapters import jax_release

COMPATIBILITY = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"
RECORD = load()


@pytest.fixture(autouse=True)
def _fresh_jax_caches() -> Iterator[None]:
    """The corpus lowers library functions other tests lower too (``jnp.linalg.eigh``...):
    JAX's caches would hand those tests lowerings located in this corpus."""
    yield
    jax.clear_caches()


@pytest.mark.slow
def test_the_record_covers_the_corpus_and_explains_every_change() -> None:
    assert set(RECORD["cases"]) == set(corpus())
    releases = [release(r) for r in RECORD["releases"]]
    assert releases == sorted(releases)
    assert RECORD["floor"] == RECORD["releases"][0]
    documented = COMPATIBILITY.read_text()
    for case, platform, change in changes(RECORD):
        where = f"{case}/{platform} since {change['since']}"
        assert change["why"].strip(), f"{where}: say why the census changed"
        assert change["since"] in RECORD["releases"], f"{where}: not a recorded release"
        assert f"`{case}`" in documented, f"{where}: list it in docs/compatibility.md"
    for case, platforms in RECORD["cases"].items():
        assert set(platforms) == set(PLATFORMS), case
        for platform, entry in platforms.items():
            since = [release(c["since"]) for c in entry.get("changes", ())]
            assert since == sorted(since), f"{case}/{platform}: changes out of order"


@pytest.mark.parametrize("case", sorted(RECORD["cases"]))
def test_census_is_the_recorded_one_for_this_jax(case: str) -> None:
    jax = jax_release()
    found = current(case)
    problems = []
    for platform in PLATFORMS:
        recorded, since = expected(RECORD, case, platform, jax)
        if found[platform] != recorded:
            problems.append(
                f"{case} on {platform}: recorded since jax {since}:\n  {json.dumps(recorded)}\n"
                f"jax {jax} finds:\n  {json.dumps(found[platform])}"
            )
    assert not problems, (
        "\n".join(problems) + "\nIf this is JAX's doing, record it (python tests/parity_corpus.py "
        "--record), say why next to it and in docs/compatibility.md"
    )
