"""ONNX operator rules that every framework backend applies the same way.

Each class here is a mixin over :class:`~d5core.onnx.slotted_operator.SlottedOperator`
for one ONNX operator (or a family of them): it names the operator, reads and checks
its attributes in ``configure``, and checks the inputs of a signature in ``check``,
computing what the check finds (a reshape target, a window, the axes to squeeze) for
the backend to reuse. A backend puts the mixin first and its own operator base
second, and writes only ``build``::

    class Reshape(ReshapeRules, TorchOperator):
        def build(self, sig, *, for_grad): ...

Nothing here imports a framework. A signature is anything with the ``shapes``,
``slots``, ``arrays``, ``values_known`` and ``value`` of
:class:`~d5core.onnx.plan.Signature`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from d5core.onnx.checks import (
    check_class_labels,
    check_concat_shapes,
    check_per_channel,
    check_scalar_input,
    dropout_ratio,
    flatten_target,
    gemm_output_shape,
    integer_values,
    normalize_axes,
    reshape_target,
    squeeze_axes,
    transpose_perm,
    unsqueeze_axes,
)
from d5core.onnx.recurrent import RecurrentAttributes
from d5core.onnx.signatures import onnx_signature
from d5core.onnx.slotted_operator import SlottedOperator
from d5core.onnx.windows import (
    SpatialWindow,
    check_auto_pad,
    conv_transpose_window,
    conv_window,
    spatial_window,
)

__all__ = [
    "LOSS_REDUCTIONS",
    "AlongAxisRules",
    "AveragePoolRules",
    "BatchNormalizationRules",
    "BroadcastingRules",
    "ConcatRules",
    "ConvRules",
    "ConvTransposeRules",
    "ConvolutionRules",
    "DropoutRules",
    "FlattenRules",
    "GeluRules",
    "GemmRules",
    "GlobalAveragePoolRules",
    "LayerNormalizationRules",
    "LogSoftmaxRules",
    "LossRules",
    "MatMulRules",
    "MaxPoolRules",
    "MeanSquaredErrorRules",
    "PoolRules",
    "RecurrentRules",
    "ReduceMaxRules",
    "ReduceMeanRules",
    "ReduceRules",
    "ReduceSumRules",
    "ReshapeRules",
    "SoftmaxCrossEntropyLossRules",
    "SoftmaxRules",
    "SqueezeRules",
    "TransposeRules",
    "UnsqueezeRules",
    "reference_mask",
]

#: The values ONNX allows for a loss's ``reduction`` attribute.
LOSS_REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")

Shape = tuple[int, ...]


def _first(sig: Any) -> Shape:
    shape: Shape | None = sig.shapes[0]
    assert shape is not None
    return shape


def _optional(sig: Any, index: int) -> Shape | None:
    return sig.shapes[index] if len(sig.shapes) > index else None


def _scalar(value: Any, kind: type[float] | type[bool]) -> Any:
    return kind(np.asarray(value).reshape(-1)[0])


def reference_mask(shape: Sequence[int], ratio: float, seed: int) -> np.ndarray:
    """The keep mask of a training-mode Dropout as d5's numpy reference draws it:
    ``numpy.random.default_rng(seed).random(shape) >= ratio``. Seed, shape and ratio
    alone fix it, so backends that use it drop the same elements as the reference."""
    return np.random.default_rng(seed).random(tuple(shape)) >= ratio


# -- shape operators ---------------------------------------------------------------


class ReshapeRules(SlottedOperator):
    """``Reshape``: 0 copies the input's axis unless ``allowzero``; -1 is inferred."""

    op_type = "Reshape"
    slots, attribute_defaults = onnx_signature("Reshape")

    def configure(self) -> None:
        self.allowzero = bool(int(self.attr("allowzero")))

    def _target(self, sig: Any) -> Shape | None:
        """The output shape; ``None`` while the shape input's value is unknown."""
        self.require_rank(sig, 1, (1,), what="(the new shape)")
        data, shape = sig.shapes[0], sig.value("shape")
        if not sig.values_known or shape is None or data is None:
            return None
        wanted = integer_values(self.op_type, "shape", shape)
        return reshape_target(data, wanted, allowzero=self.allowzero)

    def check(self, sig: Any) -> None:
        self._target(sig)


class FlattenRules(SlottedOperator):
    """``Flatten``: a 2-D result split at ``axis``."""

    op_type = "Flatten"
    slots, attribute_defaults = onnx_signature("Flatten")

    def _target(self, sig: Any) -> tuple[int, int]:
        return flatten_target(_first(sig), int(self.attr("axis")))

    def check(self, sig: Any) -> None:
        self._target(sig)


class TransposeRules(SlottedOperator):
    """``Transpose``: ``perm``, by default the axes reversed."""

    op_type = "Transpose"
    slots, attribute_defaults = onnx_signature("Transpose")

    def _perm(self, sig: Any) -> Shape:
        return transpose_perm(_first(sig), self.ints("perm"))

    def check(self, sig: Any) -> None:
        self._perm(sig)


class ConcatRules(SlottedOperator):
    """``Concat`` along the required ``axis``."""

    op_type = "Concat"
    slots, attribute_defaults = onnx_signature("Concat")

    def configure(self) -> None:
        if self.attr("axis") is None:
            raise self.fail("attribute axis is required")
        self.axis = int(self.attr("axis"))

    def check(self, sig: Any) -> None:
        check_concat_shapes([s for s in sig.shapes if s is not None], self.axis)


class _AxesInput(SlottedOperator):
    """An operator whose optional ``axes`` input (opset 13) is read as values."""

    def _given_axes(self, sig: Any) -> tuple[Shape, Any, bool]:
        """The data shape, the ``axes`` array (or ``None``), and whether it can be read."""
        given = sig.value("axes")
        return _first(sig), given, given is None or sig.values_known

    def check(self, sig: Any) -> None:
        self._dims(sig)

    def _dims(self, sig: Any) -> Shape | None:
        raise NotImplementedError


class SqueezeRules(_AxesInput):
    """``Squeeze``: the ``axes`` input, or without it every axis of size 1, go."""

    op_type = "Squeeze"
    slots, attribute_defaults = onnx_signature("Squeeze")

    def _dims(self, sig: Any) -> Shape | None:
        """The axes removed; ``None`` while ``axes`` is given but unknown."""
        shape, given, readable = self._given_axes(sig)
        return squeeze_axes(shape, given) if readable else None

    def _squeezed(self, sig: Any) -> Shape | None:
        """The output shape; ``None`` while ``axes`` is unknown."""
        dims = self._dims(sig)
        if dims is None:
            return None
        return tuple(d for i, d in enumerate(_first(sig)) if i not in dims)


class UnsqueezeRules(_AxesInput):
    """``Unsqueeze``: the required ``axes`` input counts in the output's rank."""

    op_type = "Unsqueeze"
    slots, attribute_defaults = onnx_signature("Unsqueeze")

    def _dims(self, sig: Any) -> Shape | None:
        """The new axes (non-negative, ascending); ``None`` while ``axes`` is unknown."""
        shape, given, readable = self._given_axes(sig)
        return unsqueeze_axes(shape, given) if readable else None

    def _expanded(self, sig: Any) -> Shape | None:
        """The output shape; ``None`` while ``axes`` is unknown."""
        dims = self._dims(sig)
        if dims is None:
            return None
        shape = _first(sig)
        rank = len(shape) + len(dims)
        at = {d % rank for d in dims}
        rest = iter(shape)
        return tuple(1 if i in at else next(rest) for i in range(rank))


# -- element-wise and activations ------------------------------------------------------


class BroadcastingRules(SlottedOperator):
    """An element-wise operator whose inputs broadcast together (numpy's rules)."""

    def _out_shape(self, sig: Any) -> Shape:
        """The broadcast shape of the present inputs."""
        try:
            return tuple(np.broadcast_shapes(*(s for s in sig.shapes if s is not None)))
        except ValueError:
            pairs = zip(sig.slots, sig.shapes, strict=True)
            listed = ", ".join(f"{slot.name} {self.format_shape(s or ())}" for slot, s in pairs)
            raise self.fail(f"input shapes do not broadcast: {listed}") from None

    def check(self, sig: Any) -> None:
        self._out_shape(sig)


class AlongAxisRules(SlottedOperator):
    """An operator along the one axis ``axis`` of its input (``Softmax`` and kin)."""

    def configure(self) -> None:
        self.axis = int(self.attr("axis"))

    def _axis_shape(self, sig: Any) -> Shape:
        """The input's shape, once ``axis`` is checked to lie within its rank."""
        shape = self.require_rank(sig, 0, at_least=1)
        if not -len(shape) <= self.axis < len(shape):
            raise self.fail(f"axis {self.axis} is out of range for input of shape {shape}")
        return shape

    def check(self, sig: Any) -> None:
        self._axis_shape(sig)


class SoftmaxRules(AlongAxisRules):
    """``Softmax`` (opset 13: along the one axis ``axis``)."""

    op_type = "Softmax"
    slots, attribute_defaults = onnx_signature("Softmax")


class LogSoftmaxRules(AlongAxisRules):
    """``LogSoftmax`` (opset 13: along the one axis ``axis``)."""

    op_type = "LogSoftmax"
    slots, attribute_defaults = onnx_signature("LogSoftmax")


class GeluRules(SlottedOperator):
    """``Gelu`` (opset 20): :attr:`approximate` is ``"none"`` (exact, with the error
    function) or ``"tanh"``."""

    op_type = "Gelu"
    slots, attribute_defaults = onnx_signature("Gelu")

    def configure(self) -> None:
        approximate = str(self.attr("approximate"))
        if approximate not in ("none", "tanh"):
            raise self.fail(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate


# -- reductions -----------------------------------------------------------------------


class ReduceRules(SlottedOperator):
    """A reduction over ``axes``: an attribute (ReduceMean and ReduceMax before opset
    18) or an optional input (ReduceSum since 13, every reduction since 18), not both.
    Without axes every axis is reduced, or none with ``noop_with_empty_axes``;
    ``keepdims`` keeps the reduced axes with size 1. A backend's subclass names the
    operator."""

    #: Whether reducing an axis of size 0 is refused (a maximum of nothing).
    empty_refused: ClassVar[bool] = False

    def configure(self) -> None:
        self.keepdims = bool(int(self.attr("keepdims")))
        self.noop = bool(int(self.attr("noop_with_empty_axes")))
        given = self.ints("axes") if "axes" in self.attribute_defaults else None
        self.axes_attribute = given

    def _dims(self, sig: Any) -> Shape | None:
        """The reduced axes, non-negative (empty when nothing is reduced); ``None``
        while the values of the axes input are unknown."""
        data = sig.shapes[0]
        assert data is not None
        given: list[int] | None = self.axes_attribute
        array = sig.arrays[1] if len(sig.arrays) > 1 else None
        if array is not None:
            self.require_rank(sig, 1, (1,), what="(the axes to reduce)")
            if given is not None:
                raise self.fail("axes given both as an attribute and as an input; give one")
            if not sig.values_known:
                return None
            given = integer_values(self.op_type, sig.slots[1].name, array)
        if not given:
            return () if self.noop else tuple(range(len(data)))
        return tuple(normalize_axes(self.op_type, given, len(data)))

    def check(self, sig: Any) -> None:
        dims = self._dims(sig)
        data = _first(sig)
        if dims and type(self).empty_refused and any(data[d] == 0 for d in dims):
            raise self.fail(
                f"cannot reduce data {self.format_shape(data)} along an empty axis of {dims}"
            )


class ReduceMeanRules(ReduceRules):
    """``ReduceMean``."""

    op_type = "ReduceMean"
    slots, attribute_defaults = onnx_signature("ReduceMean")


class ReduceSumRules(ReduceRules):
    """``ReduceSum``."""

    op_type = "ReduceSum"
    slots, attribute_defaults = onnx_signature("ReduceSum")


class ReduceMaxRules(ReduceRules):
    """``ReduceMax``: the maximum of nothing is undefined, so an empty reduced axis is
    refused."""

    op_type = "ReduceMax"
    slots, attribute_defaults = onnx_signature("ReduceMax")
    empty_refused = True


# -- matrix products ------------------------------------------------------------------


class GemmRules(SlottedOperator):
    """``Gemm``: ``Y = alpha * A' B' + beta * C`` with ``C`` broadcast to (M, N)."""

    op_type = "Gemm"
    slots, attribute_defaults = onnx_signature("Gemm")

    def configure(self) -> None:
        self.alpha = float(self.attr("alpha"))
        self.beta = float(self.attr("beta"))
        self.trans_a = bool(int(self.attr("transA")))
        self.trans_b = bool(int(self.attr("transB")))

    def check(self, sig: Any) -> None:
        a = self.require_rank(sig, 0, (2,), what="(M, K), or (K, M) with transA")
        b = self.require_rank(sig, 1, (2,), what="(K, N), or (N, K) with transB")
        gemm_output_shape(a, b, _optional(sig, 2), trans_a=self.trans_a, trans_b=self.trans_b)


class MatMulRules(SlottedOperator):
    """``MatMul``, with numpy's ``matmul`` semantics."""

    op_type = "MatMul"
    slots, attribute_defaults = onnx_signature("MatMul")

    def check(self, sig: Any) -> None:
        a = self.require_rank(sig, 0, at_least=1)
        b = self.require_rank(sig, 1, at_least=1)
        k_b = b[0] if len(b) == 1 else b[-2]
        if a[-1] != k_b:
            raise self.fail(f"inner dimensions differ: A is {a} and B is {b}")
        try:
            np.broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            raise self.fail(f"batch dimensions of A {a} and B {b} do not broadcast") from None


# -- convolutions and pooling ---------------------------------------------------------


class _Windowed(SlottedOperator):
    #: The class of the windows made (a backend may add methods to SpatialWindow).
    window_class: ClassVar[type[SpatialWindow]] = SpatialWindow

    def _auto_pad(self) -> str:
        return check_auto_pad(self.op_type, self.attr("auto_pad"))


class ConvolutionRules(_Windowed):
    """What ``Conv`` and ``ConvTranspose`` share: ``auto_pad``, ``group`` and the
    shapes of X and W."""

    def configure(self) -> None:
        self.auto_pad = self._auto_pad()
        self.group = int(self.attr("group"))
        if self.group < 1:
            raise self.fail(f"attribute group must be positive, got {self.group}")

    def _bias(self, sig: Any) -> Shape | None:
        return _optional(sig, 2)

    def _shapes(self, sig: Any) -> tuple[Shape, Shape]:
        """The shapes of X and W, checked against each other and ``kernel_shape``."""
        x = self.require_rank(sig, 0, (3, 4, 5), what="(N, C, then 1 to 3 spatial axes)")
        w = self.require_rank(sig, 1, (len(x),), what="(like X: two axes, then the kernel)")
        kernel_shape = self.ints("kernel_shape")
        if kernel_shape is not None and tuple(kernel_shape) != w[2:]:
            raise self.fail(f"attribute kernel_shape {kernel_shape} differs from W's {list(w[2:])}")
        return x, w

    def _window_args(self, sig: Any) -> tuple[Any, ...]:
        x, w = self._shapes(sig)
        return (self.op_type, x, w, self._bias(sig), self.group, self.auto_pad, self.ints)


class ConvRules(ConvolutionRules):
    """``Conv``."""

    op_type = "Conv"
    slots, attribute_defaults = onnx_signature("Conv")

    def _window(self, sig: Any) -> Any:
        """The convolution's window (an instance of :attr:`window_class`)."""
        return conv_window(*self._window_args(sig), cls=self.window_class)

    def check(self, sig: Any) -> None:
        self._window(sig)


class ConvTransposeRules(ConvolutionRules):
    """``ConvTranspose``."""

    op_type = "ConvTranspose"
    slots, attribute_defaults = onnx_signature("ConvTranspose")

    def _geometry(self, sig: Any) -> tuple[Any, Shape, Shape, Shape]:
        """The window, output padding, full (uncropped) sizes and output sizes."""
        geometry = conv_transpose_window(*self._window_args(sig), cls=self.window_class)
        return geometry.window, geometry.output_padding, geometry.full, geometry.out

    def check(self, sig: Any) -> None:
        self._geometry(sig)


class PoolRules(_Windowed):
    """What ``MaxPool`` and ``AveragePool`` share: ``auto_pad``, ``ceil_mode`` and the
    required ``kernel_shape``."""

    def configure(self) -> None:
        self.auto_pad = self._auto_pad()
        # ONNX sizes the output of auto_pad (VALID, SAME_*) without ceil_mode.
        self.ceil_mode = bool(int(self.attr("ceil_mode"))) and self.auto_pad == "NOTSET"
        kernel = self.ints("kernel_shape")
        if not kernel or any(k < 1 for k in kernel):
            raise self.fail(f"attribute kernel_shape is required and positive, got {kernel}")
        self.kernel_shape: tuple[int, ...] = tuple(kernel)

    def _window(self, sig: Any) -> tuple[Any, Shape]:
        """The pool's window (an instance of :attr:`window_class`) and output sizes."""
        n = len(self.kernel_shape)
        self.require_rank(sig, 0, (n + 2,), what=f"(N, C and the {n} axes of kernel_shape)")
        x = _first(sig)
        win = spatial_window(
            self.op_type, x[2:], self.kernel_shape, self.auto_pad, self.ints, cls=self.window_class
        )
        return win, win.out_sizes(self.ceil_mode)

    def check(self, sig: Any) -> None:
        self._window(sig)

    @staticmethod
    def _explicit_pads(win: SpatialWindow, out: Shape) -> list[tuple[int, int]]:
        """Pads after which unpadded, floor-mode pooling yields exactly ``out`` windows;
        the end pad may be negative (a crop) or exceed ONNX's (ceil mode)."""
        return [
            (b, (o - 1) * s + k - size - b)
            for (b, _), o, s, k, size in zip(
                win.pads, out, win.strides, win.effective_kernel, win.sizes, strict=True
            )
        ]


class MaxPoolRules(PoolRules):
    """``MaxPool``, whose ``storage_order`` orders the flat ``Indices``."""

    op_type = "MaxPool"
    slots, attribute_defaults = onnx_signature("MaxPool")

    def configure(self) -> None:
        super().configure()
        self.storage_order = int(self.attr("storage_order"))
        if self.storage_order not in (0, 1):
            raise self.fail(f"storage_order must be 0 or 1, got {self.storage_order}")


class AveragePoolRules(PoolRules):
    """``AveragePool`` (with opset 19's dilations)."""

    op_type = "AveragePool"
    slots, attribute_defaults = onnx_signature("AveragePool")

    def configure(self) -> None:
        super().configure()
        self.count_include_pad = bool(int(self.attr("count_include_pad")))


class GlobalAveragePoolRules(SlottedOperator):
    """``GlobalAveragePool``: the mean over every spatial axis."""

    op_type = "GlobalAveragePool"
    slots, attribute_defaults = onnx_signature("GlobalAveragePool")

    def check(self, sig: Any) -> None:
        self.require_rank(sig, 0, at_least=3, what="(N, C, spatial...)")


# -- normalization ----------------------------------------------------------------------


class BatchNormalizationRules(SlottedOperator):
    """``BatchNormalization`` (opset 15)."""

    op_type = "BatchNormalization"
    slots, attribute_defaults = onnx_signature("BatchNormalization")

    def configure(self) -> None:
        self.epsilon = float(self.attr("epsilon"))
        self.momentum = float(self.attr("momentum"))
        self.training = bool(int(self.attr("training_mode")))

    def check(self, sig: Any) -> None:
        x = self.require_rank(sig, 0, at_least=2, what="(N, C, ...)")
        inputs = [(sig.slots[i].name, sig.shapes[i]) for i in range(1, 5)]
        check_per_channel(self.op_type, x, inputs)


class LayerNormalizationRules(SlottedOperator):
    """``LayerNormalization`` (opset 17): over the axes from ``axis`` on; ``Scale`` and
    ``B`` are of the normalized shape or broadcast to it."""

    op_type = "LayerNormalization"
    slots, attribute_defaults = onnx_signature("LayerNormalization")

    def configure(self) -> None:
        self.epsilon = float(self.attr("epsilon"))
        self.axis = int(self.attr("axis"))
        self.stash_type = int(self.attr("stash_type"))

    def _normalized(self, sig: Any) -> Shape:
        """The normalized axes, non-negative, after checking Scale and B."""
        x = self.require_rank(sig, 0, at_least=1)
        (axis,) = normalize_axes(self.op_type, [self.axis], len(x), "axis")
        normalized = x[axis:]
        for i in (1, 2):
            shape = _optional(sig, i)
            if shape is None:
                continue
            try:
                fits = np.broadcast_shapes(normalized, shape) == normalized
            except ValueError:
                fits = False
            if not fits:
                raise self.fail(
                    f"input {sig.slots[i].name} of shape {self.format_shape(shape)} does not "
                    f"broadcast to the normalized shape {self.format_shape(normalized)} "
                    f"of X {self.format_shape(x)} (axis={self.axis})"
                )
        return tuple(range(axis, len(x)))

    def check(self, sig: Any) -> None:
        self._normalized(sig)


class DropoutRules(SlottedOperator):
    """``Dropout`` (opset 13): ``ratio`` and ``training_mode`` are optional inputs, the
    attributes of the same names their defaults."""

    op_type = "Dropout"
    slots, attribute_defaults = onnx_signature("Dropout")

    def configure(self) -> None:
        self.seed = int(self.attr("seed"))
        self.default_ratio = dropout_ratio(self.op_type, float(self.attr("ratio")))
        self.default_training = bool(int(self.attr("training_mode")))

    def _mode(self, sig: Any) -> tuple[float, bool]:
        """The ratio and whether in training mode, from the inputs or the attributes."""
        ratio_in, training_in = sig.value("ratio"), sig.value("training_mode")
        ratio = self.default_ratio if ratio_in is None else _scalar(ratio_in, float)
        training = self.default_training if training_in is None else _scalar(training_in, bool)
        return dropout_ratio(self.op_type, ratio), training

    def check(self, sig: Any) -> None:
        for slot, shape in zip(sig.slots[1:], sig.shapes[1:], strict=True):
            check_scalar_input(self.op_type, slot.name, shape)
        if sig.values_known:
            self._mode(sig)


# -- recurrent layers -------------------------------------------------------------------


class RecurrentRules(SlottedOperator):
    """``LSTM`` and ``GRU``: the backend's ``configure`` sets :attr:`config` (a
    :class:`~d5core.onnx.recurrent.RecurrentAttributes` or a subclass of it); ``check``
    checks the input shapes against it and the known ``sequence_lens`` against the
    number of steps."""

    config: RecurrentAttributes

    def check(self, sig: Any) -> None:
        self.config.check_shapes(sig.shapes, self.op_type)
        lens = sig.value("sequence_lens")
        if sig.values_known and lens is not None:
            x = _first(sig)
            steps = x[0] if self.config.layout == 0 else x[1]
            values = [int(v) for v in lens.reshape(-1)]
            if any(v < 0 or v > steps for v in values):
                raise self.fail(f"sequence_lens must lie in [0, {steps}], not {values}")


# -- losses -----------------------------------------------------------------------------


class LossRules(SlottedOperator):
    """A loss whose ``reduction`` is one of :data:`LOSS_REDUCTIONS`."""

    def configure(self) -> None:
        self.reduction = str(self.attr("reduction"))
        if self.reduction not in LOSS_REDUCTIONS:
            raise self.fail(
                f"reduction must be one of {', '.join(LOSS_REDUCTIONS)}, got {self.reduction!r}"
            )


class SoftmaxCrossEntropyLossRules(LossRules):
    """``SoftmaxCrossEntropyLoss``: labels lie in ``[0, C)`` or equal ``ignore_index``."""

    op_type = "SoftmaxCrossEntropyLoss"
    slots, attribute_defaults = onnx_signature("SoftmaxCrossEntropyLoss")

    def configure(self) -> None:
        super().configure()
        ignore = self.attr("ignore_index")
        self.ignore_index = None if ignore is None else int(ignore)

    def check(self, sig: Any) -> None:
        scores = self.require_rank(sig, 0, at_least=2, what="(N, C, ...)")
        labels = sig.arrays[1] if sig.values_known else None
        check_class_labels(
            self.op_type, scores, sig.shapes[1], _optional(sig, 2), labels, self.ignore_index
        )


class MeanSquaredErrorRules(LossRules):
    """d5's ``MeanSquaredError`` (ONNX has none): prediction and target alike."""

    op_type = "MeanSquaredError"
    slots, attribute_defaults = onnx_signature("MeanSquaredError")

    def check(self, sig: Any) -> None:
        if sig.shapes[0] != sig.shapes[1]:
            raise self.fail(
                f"input target of shape {sig.shapes[1]} must have the shape "
                f"{sig.shapes[0]} of prediction"
            )
