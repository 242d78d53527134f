"""Operators that keep a part of a tensor: Split (consecutive pieces along an axis) and
Trilu (a triangle of the last two axes). They move data without arithmetic, so the data
may be of any element type; only floating data gets a gradient, and integer inputs
(``split``, ``k``) get none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ANY_DTYPES, DataGradientOperator
from d5core.api import UsageError

__all__ = ["Split", "Trilu", "split_sizes"]


def split_sizes(length: int, split: np.ndarray | None, num_outputs: int | None) -> list[int]:
    """The sizes of Split's pieces of an axis of ``length``: ``split`` as given (it must
    add up to ``length``), else ``num_outputs`` pieces of ``ceil(length / num_outputs)``
    with a smaller last one (ONNX opset 18)."""
    if split is not None:
        sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        if any(s < 0 for s in sizes) or sum(sizes) != length:
            raise UsageError(
                f"Split: split {sizes} must be non-negative sizes adding up to the axis "
                f"length {length}"
            )
        return sizes
    if num_outputs is None:
        raise UsageError("Split needs the input split or the attribute num_outputs")
    chunk = -(-length // num_outputs)
    last = length - chunk * (num_outputs - 1)
    if last < 0:
        raise UsageError(
            f"Split: an axis of length {length} cannot be cut into {num_outputs} pieces of "
            f"{chunk}; give split, or fewer outputs"
        )
    return [chunk] * (num_outputs - 1) + [last]


class Split(DataGradientOperator):
    """ONNX Split (opset 18): cut ``input`` along ``axis`` into pieces whose sizes the
    optional int64 input ``split`` gives, or into ``num_outputs`` pieces of
    ``ceil(length / num_outputs)`` (the last one smaller). Exactly one of the two is given.
    Older opsets (``split`` an attribute before 13, ``num_outputs`` absent before 18) are
    translated to this form by the executor.

    Backward concatenates the outputs' gradients along ``axis``; an output whose gradient
    is ``None`` contributes zeros.
    """

    op_type = "Split"
    data_dtypes = ANY_DTYPES
    input_names = ("input", "split")
    integer_inputs = frozenset({1})
    defaults = MappingProxyType({"axis": 0, "num_outputs": None})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.axis = int(attributes["axis"])
        count = attributes["num_outputs"]
        self.num_outputs = None if count is None else int(count)
        if self.num_outputs is not None and self.num_outputs < 1:
            raise UsageError(f"Split: num_outputs must be 1 or more, not {self.num_outputs}")

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        rank = len(shapes[0])
        if not -rank <= self.axis < rank:
            raise UsageError(f"Split axis {self.axis} is out of range for rank {rank}")
        given = len(shapes) > 1
        if given and len(shapes[1]) != 1:
            raise UsageError(f"{self.input_name(1)} must be 1-D, but has shape {shapes[1]}")
        if given == (self.num_outputs is not None):
            raise UsageError(
                "Split takes either the input split or the attribute num_outputs, "
                "exactly one of them"
            )

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        axis = self.axis % x.ndim
        split = inputs[1] if len(inputs) > 1 else None
        sizes = split_sizes(x.shape[axis], split, self.num_outputs)
        ends = np.cumsum(sizes)[:-1]
        return [part.copy() for part in np.split(x, ends, axis=axis)]

    def data_gradient(
        self,
        grad_outputs: Sequence[np.ndarray | None],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> np.ndarray:
        x = np.asarray(inputs[0])
        parts = [
            np.zeros_like(out) if g is None else np.asarray(g, dtype=x.dtype)
            for g, out in zip(grad_outputs, outputs, strict=True)
        ]
        return np.concatenate(parts, axis=self.axis % x.ndim)


class Trilu(DataGradientOperator):
    """ONNX Trilu (opset 14): keep the upper (``upper=1``, the default) or lower triangle
    of the last two axes of ``input``, on and above (below) diagonal ``k`` (the optional
    int64 scalar input, 0 when absent; positive ``k`` is above the main diagonal), and set
    the rest to zero. Backward masks the gradient the same way."""

    op_type = "Trilu"
    data_dtypes = ANY_DTYPES
    input_names = ("input", "k")
    integer_inputs = frozenset({1})
    defaults = MappingProxyType({"upper": 1})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        upper = int(attributes["upper"])
        if upper not in (0, 1):
            raise UsageError(f"Trilu: upper must be 0 or 1, not {upper}")
        self.upper = bool(upper)

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, at_least=2)
        if len(shapes) > 1 and int(np.prod(shapes[1], dtype=np.int64)) != 1:
            raise UsageError(f"{self.input_name(1)} must hold one value, but has shape {shapes[1]}")

    def _mask(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        x = inputs[0]
        k = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 else 0
        rows, cols = x.shape[-2:]
        offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
        return offset >= k if self.upper else offset <= k

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0])
        return [np.where(self._mask(inputs), x, np.zeros((), dtype=x.dtype))]

    def data_gradient(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> np.ndarray:
        x = np.asarray(inputs[0])
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        return np.where(self._mask(inputs), dy, np.zeros((), dtype=x.dtype))
