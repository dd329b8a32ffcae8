"""Did-you-mean: what a user meant by a word where a platform, a key or a library limit was
expected (``nvidia`` for cuda, JAX's ``gpu`` for any GPU platform, ``max_cudnn_calls`` for
``max_library_calls = { cudnn = N }``, the closest known name for a misspelt one).

Example::

    >>> platform_hint("amd")
    " (did you mean 'rocm', AMD's platform?)"
    >>> did_you_mean("platfroms", ["platforms", "reference"])
    " (did you mean 'platforms'?)"

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence

from pytest_jaxport.model.budget import KEYS
from pytest_jaxport.model.classification import all_libraries
from pytest_jaxport.model.platforms import JAX_GPU, PLATFORM_ALIASES, PLATFORM_VENDORS, PLATFORMS


def _platform_words() -> dict[str, frozenset[str]]:
    words: dict[str, set[str]] = {}
    for platform in PLATFORMS:
        for word in (platform, *PLATFORM_ALIASES.get(platform, ())):
            words.setdefault(word, set()).add(platform)
    return {word: frozenset(platforms) for word, platforms in words.items()}


_PLATFORM_WORDS: Mapping[str, frozenset[str]] = _platform_words()
"""Each platform's name and :data:`~pytest_jaxport.model.platforms.PLATFORM_ALIASES`, to the
platforms each means (``gpu``: cuda, rocm and oneapi)."""


def _word_means(word: str) -> frozenset[str] | None:
    """The platforms one lower-case word means, also with a version or a plural ending
    (``cuda12``, ``gpus``); ``None`` for a word that names none."""
    for form in (word, word.rstrip("0123456789"), word.removesuffix("s")):
        if form in _PLATFORM_WORDS:
            return _PLATFORM_WORDS[form]
    return None


def platforms_meant(word: str) -> tuple[str, ...]:
    """The platforms a user's word for one means, in :data:`PLATFORMS` order: ``nvidia``,
    ``CUDA12`` and ``nvidia-gpu`` mean cuda, ``gpu`` means cuda, rocm and oneapi; ``()`` for a
    word that names none.

    >>> platforms_meant("nvidia_gpu"), platforms_meant("GPUs"), platforms_meant("float32")
    (('cuda',), ('cuda', 'rocm', 'oneapi'), ())
    """
    text = word.strip().casefold()
    whole = _word_means(text)
    found = [whole] if whole is not None else [
        meant for part in re.split(r"[^0-9a-z]+", text) if (meant := _word_means(part))
    ]  # fmt: skip
    if not found:
        return ()
    common = frozenset.intersection(*found)
    return tuple(p for p in PLATFORMS if p in common)


def platform_hint(word: str, choices: Sequence[str] = PLATFORMS) -> str:
    """What to write instead of ``word`` where a platform from ``choices`` is expected, when
    it is another name for one (``nvidia``, ``amd``, ``google``, JAX's ``gpu``); ``""`` for
    any other word.

    >>> platform_hint("nvidia")
    " (did you mean 'cuda', NVIDIA's platform?)"
    """
    meant = [p for p in platforms_meant(word) if p in choices]
    if not meant:
        return ""
    if len(meant) == 1:
        return f" (did you mean {meant[0]!r}, {PLATFORM_VENDORS[meant[0]]}'s platform?)"
    what = (
        "is JAX's name for any GPU backend"  # jax.devices("gpu")
        if set(meant) == set(JAX_GPU)
        else "could mean several platforms"
    )
    each = ", ".join(f"{p!r} for {PLATFORM_VENDORS[p]}" for p in meant)
    return f" ({word!r} {what}: write {each}, or {'both' if len(meant) == 2 else 'several'})"


LIBRARY_LIMIT_KEY = next(k.name for k in KEYS if k.kind == "libraries")
"""The budget key that limits one library's calls: ``max_cudnn_calls`` is written
``max_library_calls = { cudnn = 2 }``."""


def library_key_hint(key: str, value: object = None, *, marker: bool = False) -> str:
    """Where a budget key names a vendor library (``max_cudnn_calls``, ``cublas``), how its
    limit is written: ``max_library_calls = { cudnn = 2 }`` in pyproject.toml, or the
    marker's ``max_library_calls={"cudnn": 2}``; ``""`` for any other key. The library
    names are the classification table's
    (:func:`~pytest_jaxport.model.classification.all_libraries`).

    >>> library_key_hint("max_cudnn_calls", 2)
    ' (did you mean max_library_calls = { cudnn = 2 }?)'
    """
    parts = [p for p in re.split(r"[^0-9a-z]+", key.casefold()) if p]
    if "share" in parts:  # a share is per layer (max_vendor_share), never per library
        return ""
    known = sorted(all_libraries())
    library = next((p for p in parts if p in known), None)
    if library is None:
        library = next(
            (c[0] for p in parts if (c := difflib.get_close_matches(p, known, 1, 0.8))), None
        )
    if library is None:
        return ""
    limit = "N"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        limit = str(value)
    elif isinstance(value, float) and value.is_integer() and value >= 0:
        limit = str(int(value))
    if marker:
        return f' (did you mean {LIBRARY_LIMIT_KEY}={{"{library}": {limit}}}?)'
    return f" (did you mean {LIBRARY_LIMIT_KEY} = {{ {library} = {limit} }}?)"


def did_you_mean(
    word: str, choices: Sequence[str], *, value: object = None, marker: bool = False
) -> str:
    """A hint for ``word`` where one of ``choices`` is expected: the platform another name
    means, the library limit a budget key names (where ``max_library_calls`` is a choice;
    ``value`` is the limit written, ``marker`` the marker's syntax), else the closest
    choice."""
    hint = platform_hint(word, choices)
    if not hint and LIBRARY_LIMIT_KEY in choices:
        hint = library_key_hint(word, value, marker=marker)
    if hint:
        return hint
    folded = {c.casefold(): c for c in choices}
    if word.casefold() in folded:
        return f" (did you mean {folded[word.casefold()]!r}?)"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
