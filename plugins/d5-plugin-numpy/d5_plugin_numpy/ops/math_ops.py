"""Element-wise functions (Pow, Sqrt, Erf, Exp, Log, Gelu) and reductions (ReduceMean,
ReduceSum, ReduceMax), in the dtype of their input.

Reductions follow the contract of opset 18: the axes are an optional int64 input; the
graph executor turns the ``axes`` attribute of older opsets into that input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from d5_plugin_numpy.ops.base import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    DataGradientOperator,
    ReferenceOperator,
    as_ints,
    as_str,
    is_float,
    unbroadcast,
)
from d5core.api import TensorDescriptor, UsageError

__all__ = [
    "Erf",
    "Exp",
    "Gelu",
    "Log",
    "Pow",
    "ReduceMax",
    "ReduceMean",
    "ReduceSum",
    "Sqrt",
    "erf",
]

Grads = list[np.ndarray | None]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, element by element, in the dtype of ``x`` (computed with
    :func:`math.erf` in float64)."""
    x = np.asarray(x)
    return _erf(x).astype(x.dtype) if x.size else np.zeros_like(x)


class Pow(ReferenceOperator):
    """ONNX Pow (opset 15): ``X ** Y``, broadcast together, in the dtype of ``X``. ``Y``
    may be floating (of ``X``'s dtype) or integer.

    Gradients: ``X`` gets ``dy * Y * X ** (Y - 1)``; a floating ``Y`` gets ``dy * X ** Y
    * log(X)`` where ``X > 0``, 0 where ``X == 0`` (the limit for ``Y > 0``) and NaN
    where ``X < 0``, at which the power is not differentiable in ``Y``; an integer ``Y``
    gets none.
    """

    op_type = "Pow"
    input_names = ("X", "Y")
    min_inputs = 2
    any_dtype_inputs = frozenset({1})

    def check_inputs(self, inputs: Sequence[TensorDescriptor]) -> None:
        super().check_inputs(inputs)
        x, y = np.dtype(inputs[0].dtype), np.dtype(inputs[1].dtype)
        if y != x and not np.issubdtype(y, np.integer):
            raise UsageError(
                f"{self.input_name(1)} has dtype {y}; give {x} (X's) or an integer type"
            )

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_broadcastable(shapes)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x, y = inputs
        return [np.power(x, np.asarray(y, dtype=x.dtype)).astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        x, y = inputs
        yf = np.asarray(y, dtype=x.dtype)
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            dx = unbroadcast(dy * yf * np.power(x, yf - 1), x.shape).astype(x.dtype)
            if not is_float(y):
                return [dx, None]
            out = np.power(x, yf)
            positive = x > 0
            safe = np.where(positive, x, 1)
            local = np.where(positive, out * np.log(safe), np.where(x == 0, 0.0, np.nan))
            dexp = unbroadcast(dy * local, y.shape).astype(y.dtype)
        return [dx, dexp]


class _Unary(ReferenceOperator):
    input_names = ("X",)
    #: The numpy function of the forward, for operators that do not define ``value``.
    function: ClassVar[np.ufunc]
    #: The floating-point errors (numpy ``errstate`` names) that the forward may raise
    #: on purpose: infinities and NaN are its values there.
    expected_errors: ClassVar[tuple[str, ...]] = ()

    def value(self, x: np.ndarray) -> np.ndarray:
        """The forward of ``x``."""
        ignored: dict[str, Any] = dict.fromkeys(self.expected_errors, "ignore")
        with np.errstate(**ignored):
            return np.asarray(self.function(x))

    def derivative(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The derivative at ``x``, where the forward gave ``y``."""
        raise NotImplementedError

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.asarray(self.value(x)).astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> Grads:
        x = inputs[0]
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            return [(dy * self.derivative(x, outputs[0])).astype(x.dtype, copy=False)]


class Sqrt(_Unary):
    """``sqrt(x)`` (NaN below 0); the derivative ``1 / (2 sqrt(x))`` is infinite at 0."""

    op_type = "Sqrt"
    function = np.sqrt
    expected_errors = ("invalid",)

    def derivative(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 0.5 / y


class Exp(_Unary):
    """``exp(x)``."""

    op_type = "Exp"
    function = np.exp
    expected_errors = ("over",)

    def derivative(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return y


class Log(_Unary):
    """The natural logarithm (``-inf`` at 0, NaN below); the derivative is ``1 / x``."""

    op_type = "Log"
    function = np.log
    expected_errors = ("divide", "invalid")

    def derivative(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 1.0 / x


class Erf(_Unary):
    """The error function; its derivative is ``2 / sqrt(pi) * exp(-x**2)``."""

    op_type = "Erf"

    def value(self, x: np.ndarray) -> np.ndarray:
        return erf(x)

    def derivative(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(2.0 / math.sqrt(math.pi) * np.exp(-np.square(x)))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class Gelu(_Unary):
    """ONNX Gelu (opset 20): ``x * Phi(x)`` with the normal distribution function ``Phi``,
    computed exactly (``approximate="none"``: ``0.5 x (1 + erf(x / sqrt 2))``) or with
    the tanh approximation (``"tanh"``: ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
    x**3)))``). Backward differentiates the chosen formula exactly."""

    op_type = "Gelu"
    defaults = MappingProxyType({"approximate": "none"})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.approximate = as_str(attributes["approximate"])
        if self.approximate not in ("none", "tanh"):
            raise UsageError(f"Gelu approximate={self.approximate!r} is not one of 'none', 'tanh'")

    def value(self, x: np.ndarray) -> np.ndarray:
        if self.approximate == "tanh":
            inner = _SQRT_2_OVER_PI * (x + 0.044715 * x**3)
            return 0.5 * x * (1.0 + np.tanh(inner))
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))

    def derivative(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self.approximate == "tanh":
            t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3))
            dinner = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x**2)
            return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner
        cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * np.square(x)) / math.sqrt(2.0 * math.pi)
        return np.asarray(cdf + x * pdf)


class _Reduce(DataGradientOperator):
    """A reduction over the axes in the optional ``axes`` input (opset 18): all axes when
    it is absent or empty, unless ``noop_with_empty_axes=1``, which makes an empty or
    absent ``axes`` the identity. ``keepdims`` keeps the reduced axes with size 1. The
    ``axes`` attribute of older opsets is accepted instead of the input (not both)."""

    input_names = ("data", "axes")
    integer_inputs = frozenset({1})
    defaults = MappingProxyType({"axes": None, "keepdims": 1, "noop_with_empty_axes": 0})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.keepdims = bool(int(attributes["keepdims"]))
        self.noop = bool(int(attributes["noop_with_empty_axes"]))
        given = attributes["axes"]
        self.axes_attribute = None if given is None else list(as_ints(given, "axes"))

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        if len(shapes) > 1:
            self.require_rank(shapes, 1, 1)
            if self.axes_attribute is not None:
                raise UsageError(
                    f"{self.op_type} has axes both as an attribute and as an input; give one"
                )

    def axes(self, x: np.ndarray, inputs: Sequence[np.ndarray]) -> tuple[int, ...] | None:
        """The reduced axes, non-negative and sorted; ``None`` for the identity."""
        given = [int(a) for a in np.asarray(inputs[1]).reshape(-1)] if len(inputs) > 1 else []
        if self.axes_attribute is not None:
            given = self.axes_attribute
        if not given:
            return None if self.noop else tuple(range(x.ndim))
        rank = x.ndim
        if any(not -rank <= a < rank for a in given):
            raise UsageError(
                f"{self.op_type} axes {given} are out of range for data of shape {x.shape}; "
                f"give axes in [{-rank}, {rank - 1}]"
            )
        resolved = sorted(a % rank for a in given) if rank else []
        if len(set(resolved)) != len(resolved):
            raise UsageError(f"{self.op_type} axes {given} name an axis twice")
        return tuple(resolved)

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        axes = self.axes(x, inputs)
        if axes is None:
            return [x.copy()]
        y = np.asarray(self.reduce(x, axes)).astype(x.dtype, copy=False)
        return [y if self.keepdims else y.reshape(_dropped(x.shape, axes))]

    def local(self, x: np.ndarray, kept: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        """d output / d x, with ``kept`` the output with the reduced axes kept."""
        raise NotImplementedError

    def data_gradient(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> np.ndarray:
        x = inputs[0]
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        axes = self.axes(x, inputs)
        if axes is None:
            return dy.copy()
        kept_shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        kept = np.asarray(outputs[0], dtype=x.dtype).reshape(kept_shape)
        dx = dy.reshape(kept_shape) * self.local(x, kept, axes)
        return np.broadcast_to(dx, x.shape).astype(x.dtype)


def _dropped(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for i, n in enumerate(shape) if i not in axes)


class ReduceSum(_Reduce):
    """The sum over ``axes``; every element gets the gradient of its sum."""

    op_type = "ReduceSum"
    data_dtypes = NUMERIC_DTYPES

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return np.asarray(np.sum(x, axis=axes, keepdims=True))

    def local(self, x: np.ndarray, kept: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return np.ones((), dtype=x.dtype)


class ReduceMean(_Reduce):
    """The mean over ``axes``; every element gets ``1 / count`` of its mean's gradient
    (an empty reduction gives NaN, as ``numpy.mean``)."""

    op_type = "ReduceMean"
    data_dtypes = FLOAT_DTYPES

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        count = math.prod(x.shape[a] for a in axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.sum(x, axis=axes, keepdims=True) / x.dtype.type(count))

    def local(self, x: np.ndarray, kept: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        count = math.prod(x.shape[a] for a in axes)
        return np.asarray(1.0 / count if count else np.nan, dtype=x.dtype)


class ReduceMax(_Reduce):
    """The maximum over ``axes``. Where several elements tie for the maximum, they share
    its gradient equally (each gets ``1 / ties``), the mean of the one-sided choices; away
    from ties each maximum gets the whole gradient. An empty reduction is refused."""

    op_type = "ReduceMax"
    data_dtypes = NUMERIC_DTYPES

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        if any(x.shape[a] == 0 for a in axes):
            raise UsageError(
                f"ReduceMax over axes {list(axes)} of data of shape {x.shape} has no elements"
            )
        return np.asarray(np.max(x, axis=axes, keepdims=True))

    def local(self, x: np.ndarray, kept: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        hits = (x == kept).astype(x.dtype)
        return np.asarray(hits / hits.sum(axis=axes, keepdims=True))
