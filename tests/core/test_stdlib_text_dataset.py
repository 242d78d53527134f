"""The ``python_stdlib_text`` dataset: fixed file order, fixed vocabulary, fixed split,
next-character targets, identity, and one-line errors for bad options."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv2.datasets import data_manifest, load_dataset
from d5core.lv2.datasets.stdlib_text import (
    ASCII_UNKNOWN,
    VOCABULARIES,
    decode,
    encode,
    load_python_stdlib_text,
    stdlib_files,
)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


FAKE = {
    "os.py": "import sys\n",
    "json/__init__.py": "x = 1\n",
    "json/decoder.py": "def f():\n\treturn 2\n",
    "email/parser.py": "class P: pass\n",
    "abc.py": "# abc\n",
    "test/test_os.py": "raise SystemExit\n",
    "idlelib/idle_test/test_x.py": "bad\n",
    "lib2to3/tests/data.py": "bad\n",
    "site-packages/pkg/mod.py": "bad\n",
    "__pycache__/os.py": "bad\n",
    "_sysconfigdata__linux.py": "bad\n",
    "config-3.11-x86_64/python-config.py": "bad\n",
    "notes.txt": "not python\n",
}


def test_files_are_ordered_by_the_hash_of_their_path_and_exclusions_hold(tmp_path):
    root = _tree(tmp_path, FAKE)
    found = [relative for relative, _ in stdlib_files(root)]
    expected = sorted(
        ["os.py", "json/__init__.py", "json/decoder.py", "email/parser.py", "abc.py"],
        key=lambda r: hashlib.sha256(r.encode()).hexdigest(),
    )
    assert found == expected
    # creation order and folder listing order play no part
    again = _tree(tmp_path / "other", dict(reversed(list(FAKE.items()))))
    assert [r for r, _ in stdlib_files(again)] == expected


def test_the_ascii_vocabulary_is_fixed_and_round_trips():
    assert VOCABULARIES == {"bytes": 256, "ascii": 98}
    ids = encode(b"\n\t Az~\x7f\xc3\xa9", "ascii")
    assert ids.tolist() == [1, 2, 3, 3 + ord("A") - 32, 3 + ord("z") - 32, 97] + [ASCII_UNKNOWN] * 3
    assert decode(encode(b"def f(x):\n\treturn x\n"), "ascii") == "def f(x):\n\treturn x\n"
    assert encode(b"\xff\x00", "bytes").tolist() == [255, 0]
    with pytest.raises(UsageError, match="vocab 'utf9' is unknown"):
        encode(b"x", "utf9")


def test_windows_give_next_character_targets_and_splits_are_disjoint(tmp_path):
    root = _tree(tmp_path, {f"m{i}.py": f"value_{i} = {i * 7}\n" * 5 for i in range(40)})
    train = load_python_stdlib_text("train", seq_len=8, root=str(root), validation_fraction=0.3)
    test = load_python_stdlib_text("test", seq_len=8, root=str(root), validation_fraction=0.3)
    x, y = train.batch(np.arange(len(train)))
    assert x.dtype == y.dtype == np.int64 and x.shape == y.shape == (len(train), 8)
    stream = train.tokens
    assert np.array_equal(x.reshape(-1), stream[: x.size])
    assert np.array_equal(y.reshape(-1), stream[1 : x.size + 1])
    assert train.input_shape == (8,) and train.num_classes == 98
    a, b = train.identity(), test.identity()
    assert a["files"] + b["files"] == 40 and a["files"] > b["files"] > 0
    assert a["sha256"] == hashlib.sha256(decode(stream).encode()).hexdigest()
    # the split is by path: the same file never lands in both
    text_a, text_b = decode(train.tokens), decode(test.tokens)
    for i in range(40):
        line = f"value_{i} = {i * 7}\n"
        assert (line in text_a) != (line in text_b)


def test_max_bytes_cuts_in_file_order_and_identity_reaches_the_manifest(tmp_path):
    root = _tree(tmp_path, {f"m{i}.py": "abcdefghij" * 10 for i in range(10)})
    small = load_python_stdlib_text("train", seq_len=4, max_bytes=150, root=str(root))
    full = load_python_stdlib_text("train", seq_len=4, root=str(root))
    assert len(small.tokens) == 150
    assert np.array_equal(small.tokens, full.tokens[:150])
    ident = small.identity()
    assert ident["bytes"] == 150 and ident["files"] == 2
    assert ident["files_in_split"] == full.identity()["files"]
    manifest = data_manifest(small)
    assert manifest["sha256"] == ident["sha256"]
    assert manifest["identity"]["files"] == 2 and manifest["identity"]["python"]


def test_the_real_stdlib_is_read_the_same_way_twice():
    first = load_dataset("python_stdlib_text", "test", seq_len=32, max_bytes=20_000)
    second = load_dataset("python_stdlib_text", "test", seq_len=32, max_bytes=20_000)
    assert first.identity() == second.identity()
    assert np.array_equal(first.batch([0, 3])[0], second.batch([0, 3])[0])
    assert len(first) == (20_000 - 1) // 32
    train = load_dataset("python_stdlib_text", "train", seq_len=32, max_bytes=20_000)
    assert train.digest() != first.digest()
    relatives = [r for r, _ in stdlib_files()]
    assert relatives and not any(
        part in ("test", "tests", "site-packages", "idle_test")
        for r in relatives
        for part in r.split("/")[:-1]
    )


def test_a_differing_reference_digest_is_reported(tmp_path, capsys):
    root = _tree(tmp_path, {"a.py": "x = 1\n" * 20})
    data = load_python_stdlib_text("train", seq_len=4, root=str(root), reference_sha256="ab" * 32)
    assert data.identity()["matches_reference"] is False
    assert "differs from the recipe's reference" in capsys.readouterr().err
    same = load_python_stdlib_text(
        "train", seq_len=4, root=str(root), reference_sha256=data.digest()
    )
    assert same.identity()["matches_reference"] is True
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seq_len": 0}, "seq_len must be a positive integer"),
        ({"seq_len": 8, "max_bytes": 8}, "max_bytes must be an integer above seq_len"),
        ({"validation_fraction": 1.5}, "validation_fraction must lie strictly between"),
        ({"vocab": "words"}, "vocab 'words' is unknown"),
        ({"seq_len": 10_000, "max_bytes": 10_001}, "too few for seq_len"),
    ],
)
def test_bad_options_are_one_line_errors(options, message, tmp_path):
    root = _tree(tmp_path, {"a.py": "x = 1\n" * 20})
    with pytest.raises(UsageError, match=message) as info:
        load_python_stdlib_text("train", root=str(root), **options)
    assert "\n" not in str(info.value)


def test_an_unknown_option_or_split_is_refused():
    with pytest.raises(UsageError, match="has no option 'size'"):
        load_dataset("python_stdlib_text", "train", size=3)
    with pytest.raises(UsageError, match="has no split 'valid'"):
        load_dataset("python_stdlib_text", "valid")
