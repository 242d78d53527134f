"""Operators that move data without arithmetic: Reshape, Flatten, Transpose, Concat,
Squeeze, Unsqueeze and Identity. Shape and axes inputs (opset 13) are int64 arrays and
get no gradient. The data may be of any element type (graphs move shapes and masks with
them too); only floating data gets a gradient."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ANY_DTYPES, ReferenceOperator, as_ints
from d5core.api import UsageError

__all__ = ["Concat", "Flatten", "Identity", "Reshape", "Squeeze", "Transpose", "Unsqueeze"]

Grads = list[np.ndarray | None]


class Reshape(ReferenceOperator):
    """ONNX Reshape (opset 14): ``shape`` may hold one -1 (inferred) and zeros, which copy
    the input's size on that axis unless ``allowzero=1`` makes them literal zeros."""

    op_type = "Reshape"
    data_dtypes = ANY_DTYPES
    input_names = ("data", "shape")
    min_inputs = 2
    integer_inputs = frozenset({1})
    defaults = MappingProxyType({"allowzero": 0})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.allowzero = bool(int(attributes["allowzero"]))

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 1, 1)

    def target(self, data_shape: tuple[int, ...], shape: np.ndarray) -> tuple[int, ...]:
        """The output shape that ``shape`` asks for, with 0 and -1 resolved."""
        wanted = [int(v) for v in np.asarray(shape).reshape(-1)]
        if wanted.count(-1) > 1:
            raise UsageError(f"Reshape shape {wanted} has more than one -1")
        if any(v < -1 for v in wanted):
            raise UsageError(f"Reshape shape {wanted} has a negative size other than -1")
        if self.allowzero and -1 in wanted and 0 in wanted:
            raise UsageError(f"Reshape shape {wanted} has both -1 and 0 with allowzero=1")
        out: list[int] = []
        for i, v in enumerate(wanted):
            if v == 0 and not self.allowzero:
                if i >= len(data_shape):
                    raise UsageError(
                        f"Reshape shape {wanted} copies axis {i}, which data of shape "
                        f"{data_shape} lacks"
                    )
                v = data_shape[i]
            out.append(v)
        size = math.prod(data_shape)
        if -1 in out:
            known = math.prod(v for v in out if v != -1)
            if known == 0 or size % known:
                raise UsageError(
                    f"Reshape cannot infer -1 in {wanted} for data of shape {data_shape}"
                )
            out[out.index(-1)] = size // known
        if math.prod(out) != size:
            raise UsageError(
                f"Reshape shape {wanted} gives {tuple(out)}, which does not hold the "
                f"{size} elements of data of shape {data_shape}"
            )
        return tuple(out)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [x.reshape(self.target(x.shape, inputs[1])).copy()]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        x = inputs[0]
        return [np.asarray(grad_outputs[0], dtype=x.dtype).reshape(x.shape).copy(), None]


class Flatten(ReferenceOperator):
    """ONNX Flatten: a matrix ``(prod(shape[:axis]), prod(shape[axis:]))``."""

    op_type = "Flatten"
    data_dtypes = ANY_DTYPES
    input_names = ("input",)
    defaults = MappingProxyType({"axis": 1})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.axis = int(attributes["axis"])

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        rank = len(shapes[0])
        if not -rank <= self.axis <= rank:
            raise UsageError(
                f"Flatten axis {self.axis} is out of range for {self.input_name(0)} of "
                f"shape {shapes[0]}"
            )

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        axis = self.axis % x.ndim if self.axis < 0 else self.axis
        return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])).copy()]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        x = inputs[0]
        return [np.asarray(grad_outputs[0], dtype=x.dtype).reshape(x.shape).copy()]


class Transpose(ReferenceOperator):
    """ONNX Transpose: permute the axes by ``perm`` (reversed if absent)."""

    op_type = "Transpose"
    data_dtypes = ANY_DTYPES
    input_names = ("data",)
    defaults = MappingProxyType({"perm": None})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        perm = attributes["perm"]
        self.perm = None if perm is None else as_ints(perm, "Transpose perm")

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        if self.perm is not None and sorted(self.perm) != list(range(len(shapes[0]))):
            raise UsageError(
                f"Transpose perm {list(self.perm)} is not a permutation of the axes of "
                f"{self.input_name(0)} of shape {shapes[0]}"
            )

    def _perm(self, x: np.ndarray) -> tuple[int, ...]:
        return self.perm if self.perm is not None else tuple(reversed(range(x.ndim)))

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [x.transpose(self._perm(x)).copy()]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        x = inputs[0]
        inverse = np.argsort(self._perm(x))
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        return [dy.transpose(inverse).copy()]


class Concat(ReferenceOperator):
    """ONNX Concat: join one or more inputs along ``axis`` (required; may be negative)."""

    op_type = "Concat"
    data_dtypes = ANY_DTYPES
    input_names = ("inputs",)
    variadic = True
    defaults = MappingProxyType({"axis": None})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        if attributes["axis"] is None:
            raise UsageError("Concat needs the attribute axis")
        self.axis = int(attributes["axis"])

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        first = shapes[0]
        rank = len(first)
        if not -rank <= self.axis < rank:
            raise UsageError(f"Concat axis {self.axis} is out of range for rank {rank}")
        axis = self.axis % rank
        for i, shape in enumerate(shapes[1:], start=1):
            if len(shape) != rank or any(
                a != b for j, (a, b) in enumerate(zip(shape, first, strict=True)) if j != axis
            ):
                raise UsageError(
                    f"{self.input_name(i)} has shape {shape}; it must match {first} on "
                    f"every axis but {axis}"
                )

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.concatenate(list(inputs), axis=self.axis)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        dy = np.asarray(grad_outputs[0], dtype=inputs[0].dtype)
        ends = np.cumsum([x.shape[self.axis] for x in inputs])[:-1]
        return [part.copy() for part in np.split(dy, ends, axis=self.axis)]


def _axes(values: np.ndarray, rank: int, op_type: str) -> tuple[int, ...]:
    """Axes from an axes input, made non-negative for ``rank`` and checked."""
    axes = [int(a) for a in np.asarray(values).reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        raise UsageError(f"{op_type} axes {axes} are out of range for rank {rank}")
    resolved = tuple(sorted(a % rank for a in axes))
    if len(set(resolved)) != len(resolved):
        raise UsageError(f"{op_type} axes {axes} name an axis twice")
    return resolved


class Squeeze(ReferenceOperator):
    """ONNX Squeeze (opset 13): drop the size-1 axes listed in the ``axes`` input, or
    every size-1 axis when it is absent."""

    op_type = "Squeeze"
    data_dtypes = ANY_DTYPES
    input_names = ("data", "axes")
    integer_inputs = frozenset({1})

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        if len(inputs) < 2:
            return [np.squeeze(x).copy()]
        axes = _axes(inputs[1], x.ndim, self.op_type)
        for a in axes:
            if x.shape[a] != 1:
                raise UsageError(
                    f"Squeeze axis {a} of data of shape {x.shape} has size {x.shape[a]}, not 1"
                )
        return [np.squeeze(x, axis=axes).copy()]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        x = inputs[0]
        dx = np.asarray(grad_outputs[0], dtype=x.dtype).reshape(x.shape).copy()
        return [dx, None][: len(inputs)]


class Unsqueeze(ReferenceOperator):
    """ONNX Unsqueeze (opset 13): insert size-1 axes at the positions in ``axes``, which
    refer to the output's axes."""

    op_type = "Unsqueeze"
    data_dtypes = ANY_DTYPES
    input_names = ("data", "axes")
    min_inputs = 2
    integer_inputs = frozenset({1})

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 1, 1)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        rank = x.ndim + int(np.asarray(inputs[1]).size)
        axes = _axes(inputs[1], rank, self.op_type)
        return [np.expand_dims(x, axes).copy()]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        x = inputs[0]
        return [np.asarray(grad_outputs[0], dtype=x.dtype).reshape(x.shape).copy(), None]


class Identity(ReferenceOperator):
    """ONNX Identity: a copy of the input."""

    op_type = "Identity"
    data_dtypes = ANY_DTYPES
    input_names = ("input",)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [inputs[0].copy()]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        return [np.asarray(grad_outputs[0], dtype=inputs[0].dtype).copy()]
