"""What every reference operator shares: attribute parsing, input checks, small helpers.

A reference operator computes in the dtype of its floating inputs and returns outputs of
that dtype. Its backward is the exact vector-Jacobian product of its forward; inputs that
hold integers (shapes, axes, labels) or hyperparameters get ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from d5core.api import Operator, TensorDescriptor, UsageError

__all__ = [
    "ANY_DTYPES",
    "FLOAT_DTYPES",
    "INTEGER_DTYPES",
    "NUMERIC_DTYPES",
    "DataGradientOperator",
    "ReferenceOperator",
    "as_ints",
    "as_str",
    "is_float",
    "unbroadcast",
]

#: Element types of the reference backend.
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64")
#: Integer element types, which operators that index or compute shapes also accept.
INTEGER_DTYPES: tuple[str, ...] = (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
)  # fmt: skip
#: The float and integer types: what comparisons and shape arithmetic accept.
NUMERIC_DTYPES: tuple[str, ...] = FLOAT_DTYPES + INTEGER_DTYPES
#: Every element type an operator that only moves or inspects data accepts.
ANY_DTYPES: tuple[str, ...] = ("float16", *NUMERIC_DTYPES, "bool")


def is_float(x: np.ndarray) -> bool:
    """Whether ``x`` holds floating-point values (the ones that get gradients)."""
    return bool(np.issubdtype(np.asarray(x).dtype, np.floating))


def as_ints(value: Any, what: str) -> tuple[int, ...]:
    """An attribute holding a list of integers, as a tuple."""
    try:
        return tuple(int(v) for v in np.asarray(value).reshape(-1))
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a list of integers, not {value!r}") from None


def as_str(value: Any) -> str:
    """A string attribute, which ONNX stores as bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes along which an array of ``shape`` was broadcast."""
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


class ReferenceOperator(Operator):
    """An ONNX operator in numpy; subclasses declare their inputs and attributes."""

    #: ONNX names of the inputs, in order; the first ``min_inputs`` are required.
    input_names: ClassVar[tuple[str, ...]] = ()
    min_inputs: ClassVar[int] = 1
    #: Whether the last input may repeat (``Sum``).
    variadic: ClassVar[bool] = False
    #: Positions of inputs that hold integers (shapes, axes, labels).
    integer_inputs: ClassVar[frozenset[int]] = frozenset()
    #: Positions of inputs of any dtype (``Dropout``'s ``training_mode`` flag).
    any_dtype_inputs: ClassVar[frozenset[int]] = frozenset()
    #: Positions of inputs that must hold booleans (``Where``'s condition).
    bool_inputs: ClassVar[frozenset[int]] = frozenset()
    #: Element types the other inputs may hold (they must all share one). Only floats by
    #: default; operators that move data or compute shapes accept more.
    data_dtypes: ClassVar[tuple[str, ...]] = FLOAT_DTYPES
    #: Every attribute the operator takes, with its ONNX default.
    defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    #: Whether an optional input before the last given one may be ``None`` (absent; ONNX
    #: writes an empty name): in ``check_inputs``, ``forward`` and ``backward``.
    absent_inputs: ClassVar[bool] = False
    #: Set by an executor on the operators of a training pass, which calls ``backward``
    #: with the very arrays ``forward`` got: ``forward`` may then keep what ``backward``
    #: would compute again from them (Conv's windows, MaxPool's maxima), and ``backward``
    #: uses it only for those same input objects. Off by default: a caller may change an
    #: input in place between the two calls.
    retain: bool = False
    #: Positions of the inputs whose gradient the caller does not read (an executor sets
    #: it for inputs that depend on no trained parameter, such as the data): ``backward``
    #: may return ``None`` for them instead of computing it.
    unneeded: frozenset[int] = frozenset()
    #: Positions of the outputs somebody reads (set by an executor from the graph; ``None``:
    #: all): ``forward`` may leave out trailing outputs not among them (MaxPool's Indices).
    read: frozenset[int] | None = None

    def __init__(self, attributes: Mapping[str, Any] | None = None) -> None:
        super().__init__(attributes)
        unknown = sorted(set(self.attributes) - set(self.defaults))
        if unknown:
            takes = ", ".join(sorted(self.defaults)) or "none"
            raise UsageError(f"{self.op_type} has no attribute {unknown[0]!r}; it takes: {takes}")
        self.configure({**self.defaults, **self.attributes})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        """Read and check the attributes (defaults filled in); raise :class:`UsageError`."""

    # -- input checks ------------------------------------------------------

    def input_name(self, i: int) -> str:
        names = self.input_names
        name = names[min(i, len(names) - 1)] if names else "input"
        return f"{self.op_type} input {i} ({name})"

    def check_inputs(self, inputs: Sequence[TensorDescriptor]) -> None:
        """Raise :class:`UsageError` with one line if these inputs cannot be used."""
        count = len(inputs)
        most = None if self.variadic else len(self.input_names)
        if count < self.min_inputs or (most is not None and count > most):
            if most is None:
                wanted = f"at least {self.min_inputs}"
            elif most == self.min_inputs:
                wanted = f"{most}"
            else:
                wanted = f"{self.min_inputs} to {most}"
            raise UsageError(
                f"{self.op_type} takes {wanted} inputs ({', '.join(self.input_names)}), not {count}"
            )
        float_dtype = None
        for i, desc in enumerate(inputs):
            dt = np.dtype(desc.dtype)
            if i in self.any_dtype_inputs:
                continue
            if i in self.integer_inputs:
                if not np.issubdtype(dt, np.integer):
                    raise UsageError(f"{self.input_name(i)} must hold integers, not {desc.dtype}")
                continue
            if i in self.bool_inputs:
                if dt != np.bool_:
                    raise UsageError(f"{self.input_name(i)} must hold booleans, not {desc.dtype}")
                continue
            if dt.name not in self.data_dtypes:
                if self.data_dtypes == FLOAT_DTYPES:
                    raise UsageError(
                        f"{self.input_name(i)} has dtype {desc.dtype}; the numpy backend "
                        f"supports {', '.join(FLOAT_DTYPES)}"
                    )
                raise UsageError(
                    f"{self.input_name(i)} has dtype {desc.dtype}; {self.op_type} takes "
                    f"{', '.join(self.data_dtypes)}"
                )
            if float_dtype is not None and dt.name != float_dtype:
                kind = "floating" if self.data_dtypes == FLOAT_DTYPES else "data"
                raise UsageError(
                    f"{self.input_name(i)} has dtype {desc.dtype} but earlier inputs "
                    f"have {float_dtype}; give all {kind} inputs one dtype"
                )
            float_dtype = dt.name
        self.check_shapes([tuple(d.shape) for d in inputs])

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        """Raise :class:`UsageError` if the input shapes do not fit together."""

    def require_rank(
        self,
        shapes: Sequence[tuple[int, ...]],
        i: int,
        rank: int | None = None,
        *,
        at_least: int | None = None,
    ) -> None:
        """Check the rank of input ``i``."""
        got = len(shapes[i])
        if rank is not None and got != rank:
            raise UsageError(
                f"{self.input_name(i)} must have rank {rank}, but has shape {shapes[i]}"
            )
        if at_least is not None and got < at_least:
            raise UsageError(
                f"{self.input_name(i)} must have rank {at_least} or more, but has shape {shapes[i]}"
            )

    def require_broadcastable(self, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        """The broadcast shape of ``shapes``; raise naming the input that does not fit."""
        result: tuple[int, ...] = ()
        for i, shape in enumerate(shapes):
            try:
                result = tuple(np.broadcast_shapes(result, shape))
            except ValueError:
                raise UsageError(
                    f"{self.input_name(i)} has shape {shape}, which does not broadcast "
                    f"with {result}"
                ) from None
        return result


class DataGradientOperator(ReferenceOperator):
    """A reference operator whose only differentiable input is the first (the data; the
    others hold indices, shapes or flags). Its backward gives ``None`` for the other
    inputs, and for the data too when it does not hold floats; otherwise the data's
    gradient is :meth:`data_gradient`'s."""

    def data_gradient(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> np.ndarray:
        """The gradient of the first input (a floating array), given the outputs'."""
        raise NotImplementedError

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        rest: list[np.ndarray | None] = [None] * (len(inputs) - 1)
        if not is_float(inputs[0]):
            return [None, *rest]
        return [self.data_gradient(grad_outputs, inputs, outputs), *rest]
