"""The data a run reads: content digests, the data folder, and one-line errors for damaged
IDX files (issue 11, items 13 and 18)."""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv2.datasets import data_manifest, load_dataset
from d5core.lv2.datasets.arrays import ArrayDataset
from d5core.lv2.datasets.idx import read_idx


def _idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(root: Path, seed: int, n: int = 6) -> None:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for prefix in ("train", "t10k"):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        (root / f"{prefix}-images-idx3-ubyte").write_bytes(_idx_bytes(images))
        (root / f"{prefix}-labels-idx1-ubyte").write_bytes(_idx_bytes(labels))


# -- item 13: the data a run read is digested and its folder recorded ---------------------


def test_two_mnist_sets_behind_d5_data_dir_get_different_digests(tmp_path, monkeypatch):
    _write_mnist(tmp_path / "one" / "mnist", seed=1)
    _write_mnist(tmp_path / "two" / "mnist", seed=2)
    manifests = []
    for folder in ("one", "two"):
        monkeypatch.setenv("D5_DATA_DIR", str(tmp_path / folder))
        manifests.append(data_manifest(load_dataset("mnist", "train")))
    one, two = manifests
    assert one["sha256"] != two["sha256"] and len(one["sha256"]) == 64
    assert one["data_dir"] == str(tmp_path / "one") and two["data_dir"] == str(tmp_path / "two")
    paths = [f["path"] for f in one["files"]]
    assert paths == [
        str(tmp_path / "one" / "mnist" / "train-images-idx3-ubyte"),
        str(tmp_path / "one" / "mnist" / "train-labels-idx1-ubyte"),
    ]
    labels = (tmp_path / "one" / "mnist" / "train-labels-idx1-ubyte").read_bytes()
    assert one["files"][1]["sha256"] == hashlib.sha256(labels).hexdigest()


def test_the_same_files_give_the_same_digest_wherever_they_lie(tmp_path):
    _write_mnist(tmp_path / "a", seed=3)
    _write_mnist(tmp_path / "b", seed=3)
    a = data_manifest(load_dataset("mnist", "test", root=tmp_path / "a"))
    b = data_manifest(load_dataset("mnist", "test", root=tmp_path / "b"))
    assert a["sha256"] == b["sha256"] and a["data_dir"] is None


def test_datasets_held_in_arrays_are_digested_by_content():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    same = data_manifest(ArrayDataset(x, np.array([0, 1, 2])))
    again = data_manifest(ArrayDataset(x.copy(), np.array([0, 1, 2])))
    other = data_manifest(ArrayDataset(x, np.array([0, 1, 1])))
    assert same["sha256"] == again["sha256"] != other["sha256"]
    assert same["files"] == []


def test_a_dataset_with_no_way_to_digest_it_says_so():
    class Opaque:
        name = "opaque"

    manifest = data_manifest(Opaque())
    assert manifest["sha256"] is None and "offers no content digest" in manifest["note"]


# -- item 18: damaged IDX files are short one-line usage errors --------------------------


def test_a_truncated_gz_idx_file_is_a_usage_error_not_an_eof(tmp_path):
    data = gzip.compress(_idx_bytes(np.zeros((20, 28, 28))))
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match="is truncated or corrupt") as info:
        read_idx(path)
    assert "\n" not in str(info.value) and "download it again" in str(info.value)


def test_a_gz_idx_file_that_is_no_gzip_is_a_usage_error(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(b"this is not gzip data at all")
    with pytest.raises(UsageError, match="is truncated or corrupt"):
        read_idx(path)


def test_a_header_listing_many_dimensions_gives_a_short_error(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(struct.pack(">BBBB", 0, 0, 0x08, 200) + b"\xff" * 4 * 200 + b"\0" * 10)
    for mmap in (False, True):
        with pytest.raises(UsageError) as info:
            read_idx(path, mmap=mmap)
        message = str(info.value)
        assert "200 dimensions" in message and "truncated or corrupt" in message
        assert len(message) < len(str(path)) + 150 and "\n" not in message


def test_a_memory_mapped_file_shorter_than_its_header_is_a_usage_error(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(_idx_bytes(np.zeros((3, 4, 4)))[:-5])
    with pytest.raises(UsageError, match="needs 48 data bytes, it holds 43"):
        read_idx(path, mmap=True)
