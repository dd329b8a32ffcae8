"""Tests of pytest_jaxport.report.outputs.

Saved outputs: .npz without pickle, stable file names, extended dtypes, refusals."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_jaxport.model.compare import Leaf, Outputs, compare
from pytest_jaxport.report.outputs import (
    INDEX_KEY,
    OutputsError,
    load_outputs,
    outputs_name,
    save_outputs,
)

NODEID = "tests/test_models.py::test_mlp[batch-8]"


def outputs(*leaves: tuple[str, np.ndarray], structure: str = "PyTreeDef({'w': *})") -> Outputs:
    return Outputs(structure=structure, leaves=tuple(Leaf(path=p, array=a) for p, a in leaves))


def bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def assert_same(a: Outputs, b: Outputs) -> None:
    assert a.structure == b.structure
    assert [leaf.path for leaf in a.leaves] == [leaf.path for leaf in b.leaves]
    for x, y in zip(a.leaves, b.leaves, strict=True):
        assert x.array.dtype == y.array.dtype
        assert x.array.shape == y.array.shape
        assert bits(x.array) == bits(y.array)


def test_round_trip_keeps_structure_paths_dtypes_and_values(tmp_path: Path) -> None:
    original = outputs(
        ("['w']", np.arange(6, dtype=np.float32).reshape(2, 3)),
        ("['b'][0]", np.array([True, False])),
        ("[1].x", np.array(3, dtype=np.int64)),
        ("<odd> 'quotes' \"and\" ünïcode", np.zeros((0, 4), dtype=np.complex64)),
        structure="PyTreeDef(({'b': [*], 'w': *}, CustomNode(Foo[()], [*]), *))",
    )
    name = save_outputs(tmp_path, NODEID, "mlp", "cpu", original)
    assert (tmp_path / name).is_file()
    assert_same(load_outputs(tmp_path / name), original)
    assert compare(original, load_outputs(tmp_path / name), reference_platform="a", platform="b").ok


@pytest.mark.parametrize(
    "dtype",
    [
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e5m2,
        ml_dtypes.int4,
        ml_dtypes.float4_e2m1fn,
        np.float16,
    ],
    ids=lambda d: np.dtype(d).name,
)
def test_extended_dtypes_keep_their_dtype(tmp_path: Path, dtype: type) -> None:
    values: np.ndarray = np.array([[0.5, -1.0, 2.0], [0.0, 1.5, -0.5]], dtype=np.float32).astype(
        dtype
    )
    scalar: np.ndarray = np.array(1.0, dtype=np.float32).astype(dtype)
    original = outputs(("a", values), ("s", scalar), ("e", np.zeros((3, 0), dtype=dtype)))
    loaded = load_outputs(tmp_path / save_outputs(tmp_path, NODEID, "f", "tpu", original))
    assert_same(loaded, original)
    assert loaded.leaves[0].array.dtype == np.dtype(dtype)


def test_jax_float0_round_trips(tmp_path: Path) -> None:
    import jax

    original = outputs(("g", np.zeros((2, 3), dtype=jax.dtypes.float0)))
    assert_same(
        load_outputs(tmp_path / save_outputs(tmp_path, NODEID, "f", "cpu", original)), original
    )


def test_file_names_are_safe_stable_and_distinct() -> None:
    a = outputs_name("tests/t.py::test_f[a/b]", "f", "cuda")
    b = outputs_name("tests/t.py::test_f[a_b]", "f", "cuda")
    assert a == outputs_name("tests/t.py::test_f[a/b]", "f", "cuda")
    assert a != b
    assert a.startswith("tests_t.py__test_f_a_b.f.cuda-")
    assert a.endswith(".npz")
    for name in (a, b, outputs_name("x" * 500, "../../etc", "cpu"), outputs_name("", "", "")):
        assert "/" not in name
        assert "\\" not in name
        assert not name.startswith(".")
        assert len(name) < 120
    assert outputs_name("t", "a.b", "cpu") != outputs_name("t.a", "b", "cpu")


def test_save_is_atomic_and_overwrites(tmp_path: Path) -> None:
    folder = tmp_path / "outputs-cpu" / "nested"
    first = save_outputs(folder, NODEID, "mlp", "cpu", outputs(("w", np.ones(3))))
    second = save_outputs(folder, NODEID, "mlp", "cpu", outputs(("w", np.zeros(3))))
    assert first == second
    assert sorted(p.name for p in folder.iterdir()) == [first]
    assert load_outputs(folder / first).leaves[0].array.tolist() == [0.0, 0.0, 0.0]


def test_object_arrays_are_refused_on_save(tmp_path: Path) -> None:
    bad = outputs(("w", np.array([{"a": 1}], dtype=object)))
    with pytest.raises(OutputsError, match=r"leaf w has dtype object, which needs pickle"):
        save_outputs(tmp_path, NODEID, "mlp", "cpu", bad)
    assert list(tmp_path.iterdir()) == []


UNPICKLED: list[object] = []


class Tripwire:
    """Records being unpickled: loading must never get that far."""

    def __setstate__(self, state: object) -> None:
        UNPICKLED.append(state)


def test_object_arrays_are_refused_on_load_without_unpickling(tmp_path: Path) -> None:
    good = tmp_path / save_outputs(tmp_path, NODEID, "mlp", "cpu", outputs(("w", np.ones(2))))
    with np.load(good) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["leaf_0"] = np.array([Tripwire()], dtype=object)
    np.savez(good, **arrays)  # numpy pickles object arrays when asked to save them
    with pytest.raises(OutputsError, match=rf"^{good}: unusable outputs file: .*pickle"):
        load_outputs(good)
    assert UNPICKLED == []


def test_missing_truncated_and_foreign_files_are_named(tmp_path: Path) -> None:
    good = tmp_path / save_outputs(tmp_path, NODEID, "mlp", "cpu", outputs(("w", np.ones(64))))
    with pytest.raises(OutputsError, match=rf"^{tmp_path / 'gone.npz'}: no such outputs file"):
        load_outputs(tmp_path / "gone.npz")

    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(OutputsError, match=rf"^{truncated}: "):
        load_outputs(truncated)

    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(OutputsError, match=rf"^{text}: "):
        load_outputs(text)

    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, x=np.ones(2))
    with pytest.raises(OutputsError, match=rf"^{foreign}: not a pytest-jaxport outputs file"):
        load_outputs(foreign)

    bare = tmp_path / "bare.npy"
    np.save(bare, np.ones(2))
    with pytest.raises(OutputsError, match=rf"^{bare}: not a pytest-jaxport outputs file"):
        load_outputs(bare)


def test_index_is_checked(tmp_path: Path) -> None:
    path = tmp_path / save_outputs(tmp_path, NODEID, "mlp", "cpu", outputs(("w", np.ones(2))))
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    index = json.loads(arrays[INDEX_KEY].tobytes())

    index["format"] = 99
    arrays[INDEX_KEY] = np.frombuffer(json.dumps(index).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(OutputsError, match=r"outputs format 99 is not supported"):
        load_outputs(path)

    index["format"] = 1
    index["leaves"][0]["shape"] = [3]
    arrays[INDEX_KEY] = np.frombuffer(json.dumps(index).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(OutputsError, match=r"leaf leaf_0 is float64\[2\], the index says"):
        load_outputs(path)

    del arrays["leaf_0"]
    np.savez(path, **arrays)
    with pytest.raises(OutputsError, match=r"leaf leaf_0 \(w\) is missing"):
        load_outputs(path)


def test_file_is_a_plain_zip_of_npy(tmp_path: Path) -> None:
    path = tmp_path / save_outputs(
        tmp_path, NODEID, "mlp", "cpu", outputs(("w", np.ones(2, ml_dtypes.bfloat16)))
    )
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == [f"{INDEX_KEY}.npy", "leaf_0.npy"]


NATIVE_DTYPES = st.sampled_from(
    [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ]
)
EXTENDED = st.sampled_from(["bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4"])


@st.composite
def any_array(draw: st.DrawFn) -> np.ndarray:
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    if draw(st.booleans()):
        return draw(hnp.arrays(np.dtype(draw(NATIVE_DTYPES)), shape))
    # Every bit pattern of an extended dtype, NaNs and infinities included.
    dtype = np.dtype(getattr(ml_dtypes, draw(EXTENDED)))
    raw = draw(hnp.arrays(np.uint8, (*shape, dtype.itemsize)))
    extended: np.ndarray = raw.view(dtype).reshape(shape)
    return extended


@settings(max_examples=60, deadline=None)
@given(
    arrays=st.lists(any_array(), min_size=0, max_size=4),
    paths=st.lists(st.text(max_size=12), min_size=4, max_size=4),
    structure=st.text(max_size=30),
)
def test_save_load_round_trips_any_array(
    tmp_path_factory: pytest.TempPathFactory,
    arrays: list[np.ndarray],
    paths: list[str],
    structure: str,
) -> None:
    folder = tmp_path_factory.mktemp("rt")
    original = Outputs(
        structure=structure,
        leaves=tuple(
            Leaf(path=p, array=a) for p, a in zip(paths[: len(arrays)], arrays, strict=True)
        ),
    )
    assert_same(load_outputs(folder / save_outputs(folder, NODEID, "f", "cpu", original)), original)


def test_typed_key_data_keeps_its_implementation(tmp_path: Path) -> None:
    key = Leaf(path="['key']", array=np.uint32([[1, 2], [3, 4]]), key_impl="threefry2x32")
    plain = Leaf(path="['x']", array=np.float32([0.5]))
    original = Outputs(structure="PyTreeDef({'key': *, 'x': *})", leaves=(key, plain))
    loaded = load_outputs(tmp_path / save_outputs(tmp_path, NODEID, "f", "cpu", original))
    assert_same(loaded, original)
    assert [leaf.key_impl for leaf in loaded.leaves] == ["threefry2x32", None]
    assert compare(original, loaded, reference_platform="cpu", platform="cuda").ok


def test_a_key_implementation_that_is_not_a_name_is_refused(tmp_path: Path) -> None:
    leaf = Leaf(path="", array=np.uint32([1, 2]), key_impl="rbg")
    single = Outputs(structure="*", leaves=(leaf,))
    path = tmp_path / save_outputs(tmp_path, NODEID, "f", "cpu", single)
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    index = json.loads(arrays[INDEX_KEY].tobytes())
    index["leaves"][0]["key_impl"] = 3
    arrays[INDEX_KEY] = np.frombuffer(json.dumps(index).encode(), dtype=np.uint8)
    with path.open("wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(OutputsError, match=r"leaf_0: key_impl 3 is not a name"):
        load_outputs(path)
