"""The ``digits`` dataset: scikit-learn's 1,797 8x8 handwritten digits (ships offline).

scikit-learn is an optional dependency of d5core, installed with the ``digits`` extra
(``pip install 'd5core[digits]'``); it is imported only when the dataset is loaded, or
by ``d5 run`` before the run's clock starts (:func:`~d5core.levels.training.preloads`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.levels.training import preloads
from d5core.lv2.datasets._common import check_split, split_index
from d5core.lv2.datasets.arrays import ArrayDataset

__all__ = ["INSTALL_HINT", "TEST_FRACTION", "load_digits_dataset"]

#: The fraction of examples, per class, in the test split.
TEST_FRACTION = 0.2
#: What to install when scikit-learn is missing.
INSTALL_HINT = "pip install 'd5core[digits]'"


def _reader() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """scikit-learn's ``load_digits`` and ``train_test_split``.

    :raises UsageError: one line, when scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as exc:
        reason = " ".join(str(exc).split())
        raise UsageError(
            f"the digits dataset needs scikit-learn ({reason}); install it: {INSTALL_HINT}"
        ) from None
    return load_digits, train_test_split


@functools.lru_cache(maxsize=1)
def _digits_and_split() -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The digits and the sorted train and test indices, read and split once per process:
    a run loads both splits, and parsing the bundled file is most of the cost.

    Callers index the arrays, which copies: the cached ones are never handed out.
    """
    load_digits, train_test_split = _reader()
    x, y = load_digits(return_X_y=True)
    parts = train_test_split(np.arange(len(y)), test_size=TEST_FRACTION, stratify=y, random_state=0)
    return x, y, (np.sort(parts[0]), np.sort(parts[1]))


@preloads(_reader)
def load_digits_dataset(split: str, *, flatten: bool = True) -> ArrayDataset:
    """The ``digits`` entry: pixels scaled to [0, 1], 1437 train / 360 test examples.

    The split is stratified and fixed (``train_test_split`` with seed 0, test fraction
    0.2). ``flatten=True`` gives inputs of shape ``(64,)``, ``False`` gives ``(1, 8, 8)``.

    :raises UsageError: one line, when scikit-learn is not installed.
    """
    check_split("digits", split)
    x, y, parts = _digits_and_split()
    idx = parts[split_index(split)]
    return ArrayDataset(
        (x[idx] / 16.0).astype(np.float32),
        y[idx].astype(np.int64),
        name=f"digits/{split}",
        num_classes=10,
        input_shape=(64,) if flatten else (1, 8, 8),
    )
