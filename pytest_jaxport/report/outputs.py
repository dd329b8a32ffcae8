"""Save one check's outputs on one platform as ``.npz``, and load them back, without pickle.

A CI leg runs with ``--jaxport-save-outputs=DIR``; each executed platform of each check
writes one file there, and the JSON report records its path (relative to the report), so
``jaxport merge`` can compare outputs across legs that never shared a machine.

File layout (format 1), all plain numpy arrays, loadable with ``allow_pickle=False``:

- ``__jaxport__``: a ``uint8`` array holding UTF-8 JSON::

      {"format": 1, "nodeid": "...", "check": "...", "platform": "cuda",
       "structure": "PyTreeDef({'y': *})",
       "leaves": [{"key": "leaf_0", "path": "['y']", "dtype": "bfloat16",
                   "shape": [2, 3], "encoding": "bytes"}]}

- ``leaf_<i>``: leaf ``i`` in flattening order. A typed PRNG key (``jax.random.key``) is
  stored as its data (``jax.random.key_data``, ``uint32``) with ``"key_impl":
  "threefry2x32"`` in its index entry: ``jax.random.wrap_key_data(data, impl=...)`` rebuilds
  it. NumPy's own dtypes are stored as themselves
  (``"encoding": "native"``). ``ml_dtypes`` types (bfloat16, float8, int4, ...) would come
  back from ``.npz`` as anonymous ``|V2`` bytes, so they are stored as their raw bytes
  (``uint8``) with the dtype name in the index (``"encoding": "bytes"``) and rebuilt with
  ``ml_dtypes`` on load. Object arrays are refused on save and on load.

Example::

    >>> import tempfile, numpy as np
    >>> from pytest_jaxport.model.compare import Leaf, Outputs
    >>> folder = Path(tempfile.mkdtemp())
    >>> out = Outputs(structure="*", leaves=(Leaf(path="", array=np.float32([1, 2])),))
    >>> name = save_outputs(folder, "tests/test_m.py::test_mlp", "mlp", "cpu", out)
    >>> name
    'tests_test_m.py__test_mlp.mlp.cpu-e5b49674c5.npz'
    >>> load_outputs(folder / name).leaves[0].array.tolist()
    [1.0, 2.0]

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from pytest_jaxport.model.compare import Array, Leaf, Outputs
from pytest_jaxport.model.jsontypes import JsonMapping, JsonObject, as_list, as_table, read_text

FORMAT = 1
INDEX_KEY = "__jaxport__"
_LEAF_KEY = "leaf_{}"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_STEM_LIMIT = 80  # file name stems stay well under every filesystem's 255-byte limit


class OutputsError(ValueError):
    """An outputs file cannot be written or used; the message names the file and why."""


def outputs_name(nodeid: str, check: str, platform: str) -> str:
    """The file name for one (test, check, platform): readable, stable and collision-free.

    The readable part is sanitized and shortened; the hash of the exact triple keeps two
    node ids that sanitize alike (``t[a/b]`` and ``t[a_b]``) apart.

    >>> outputs_name("tests/test_m.py::test_f[a/b]", "f", "cuda")
    'tests_test_m.py__test_f_a_b.f.cuda-d841b11eae.npz'
    """
    digest = hashlib.sha256("\0".join((nodeid, check, platform)).encode()).hexdigest()[:10]
    readable = ".".join(_UNSAFE.sub("_", part).strip("_.") or "_" for part in (
        nodeid.replace("::", "__"), check, platform))  # fmt: skip
    if len(readable) > _STEM_LIMIT:
        readable = readable[:_STEM_LIMIT].rstrip("_.")
    return f"{readable}-{digest}.npz"


def _is_ml_dtype(dtype: np.dtype[np.generic]) -> bool:
    """A user-defined dtype (ml_dtypes'): ``.npz`` cannot name it (some say kind ``f``)."""
    return dtype.isbuiltin == 2  # numpy's code for "user-defined"


def _encode(index: int, leaf: Leaf) -> tuple[JsonObject, Array]:
    array = np.asarray(leaf.array)
    if array.dtype.hasobject:
        raise OutputsError(
            f"leaf {leaf.path or '<root>'} has dtype {array.dtype}, which needs pickle; "
            "only numeric, bool, string and ml_dtypes arrays can be saved"
        )
    entry: JsonObject = {
        "key": _LEAF_KEY.format(index),
        "path": leaf.path,
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "encoding": "native",
    }
    if leaf.key_impl is not None:
        entry["key_impl"] = leaf.key_impl
    if _is_ml_dtype(array.dtype):
        entry["encoding"] = "bytes"
        # reshape(-1) first: a 0-d array cannot change its itemsize with view().
        return entry, np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return entry, array


def save_outputs(folder: Path, nodeid: str, check: str, platform: str, outputs: Outputs) -> str:
    """Write ``outputs`` to ``folder`` atomically; return the file's path relative to ``folder``.

    The folder is created if needed. A run killed mid-write leaves no partial ``.npz``
    behind under the final name.
    """
    folder.mkdir(parents=True, exist_ok=True)
    name = outputs_name(nodeid, check, platform)
    arrays: dict[str, Array] = {}
    leaves = []
    for i, leaf in enumerate(outputs.leaves):
        entry, array = _encode(i, leaf)
        leaves.append(entry)
        arrays[_LEAF_KEY.format(i)] = array
    index = {
        "format": FORMAT,
        "nodeid": nodeid,
        "check": check,
        "platform": platform,
        "structure": outputs.structure,
        "leaves": leaves,
    }
    arrays[INDEX_KEY] = np.frombuffer(json.dumps(index).encode("utf-8"), dtype=np.uint8)
    path = folder / name
    tmp = path.with_name(f"{name}.{os.getpid()}.tmp")
    try:
        # A file object, not a name: np.savez appends ".npz" to names that lack it.
        with tmp.open("wb") as f:
            np.savez_compressed(f, **arrays)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return name


def load_outputs(path: Path) -> Outputs:
    """Read a file written by :func:`save_outputs`; never unpickles anything.

    Raises :class:`OutputsError` naming ``path`` when it is missing, truncated, not an
    outputs file, or holds object (pickled) arrays.
    """
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise OutputsError(f"{path}: not a pytest-jaxport outputs file (a bare .npy)")
        with loaded as npz:
            if INDEX_KEY not in npz.files:
                raise OutputsError(f"{path}: not a pytest-jaxport outputs file (no index)")
            index = _read_index(path, npz[INDEX_KEY])
            leaves = tuple(_decode(path, npz, entry) for entry in as_list(index["leaves"]))
    except OutputsError:
        raise
    except FileNotFoundError:
        raise OutputsError(f"{path}: no such outputs file") from None
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as e:
        raise OutputsError(f"{path}: cannot be read (truncated?): {e}") from None
    except ValueError as e:  # numpy's refusal of pickled data, bad headers
        raise OutputsError(f"{path}: unusable outputs file: {e}") from None
    return Outputs(structure=read_text(index, "structure"), leaves=leaves)


def _read_index(path: Path, raw: Array) -> JsonMapping:
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise OutputsError(f"{path}: malformed index ({raw.dtype}, shape {raw.shape})")
    try:
        index = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OutputsError(f"{path}: malformed index: {e}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        found = index.get("format") if isinstance(index, dict) else None
        raise OutputsError(
            f"{path}: outputs format {found!r} is not supported (this version reads {FORMAT})"
        )
    if not isinstance(index.get("structure"), str) or not isinstance(index.get("leaves"), list):
        raise OutputsError(f"{path}: malformed index: no structure or leaves")
    return index


def _decode(path: Path, npz: np.lib.npyio.NpzFile, entry: object) -> Leaf:
    try:
        found = as_table(entry, "entry")
        key, leaf_path, dtype_name = (
            read_text(found, "key"),
            found["path"],
            read_text(found, "dtype"),
        )
        shape = tuple(_dimension(n) for n in as_list(found["shape"], "shape"))
        encoding = found["encoding"]
        key_impl = found.get("key_impl")
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        raise OutputsError(f"{path}: malformed index entry {entry!r}: {e}") from None
    if key_impl is not None and not isinstance(key_impl, str):
        raise OutputsError(f"{path}: leaf {key}: key_impl {key_impl!r} is not a name")
    if key not in npz.files:
        raise OutputsError(f"{path}: leaf {key} ({leaf_path or '<root>'}) is missing")
    stored = npz[key]
    if encoding == "native":
        array = stored
    elif encoding == "bytes":
        array = _rebuild(path, stored, dtype_name, shape)
    else:
        raise OutputsError(f"{path}: leaf {key}: unknown encoding {encoding!r}")
    if array.shape != shape or array.dtype.name != dtype_name:
        raise OutputsError(
            f"{path}: leaf {key} is {array.dtype.name}{list(array.shape)}, "
            f"the index says {dtype_name}{list(shape)}"
        )
    return Leaf(path=str(leaf_path), array=array, key_impl=key_impl)


def _dimension(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"dimension {value!r} is not a number")
    return int(value)


def _rebuild(path: Path, stored: Array, dtype_name: str, shape: tuple[int, ...]) -> Array:
    import ml_dtypes  # ships with jaxlib; needed only for its extended dtypes

    scalar = getattr(ml_dtypes, dtype_name, None)
    if scalar is None:
        raise OutputsError(
            f"{path}: dtype {dtype_name!r} is unknown to ml_dtypes {ml_dtypes.__version__}"
        )
    dtype = np.dtype(scalar)
    if stored.dtype != np.uint8 or stored.size != dtype.itemsize * int(np.prod(shape)):
        raise OutputsError(f"{path}: {dtype_name} leaf has {stored.size} bytes for shape {shape}")
    rebuilt: Array = stored.view(dtype).reshape(shape)
    return rebuilt
