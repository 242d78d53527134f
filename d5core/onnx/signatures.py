"""The ONNX signatures of the operators d5's backends run: their inputs and attributes.

What inputs an ONNX operator takes (and which of them are optional, variadic, integer
or without a gradient) and which attributes it understands, with their defaults, is
ONNX's definition, the same for every backend. Backends take it from here
(:func:`onnx_signature`, through :mod:`d5core.api`) instead of writing it out again.
Attributes whose default is ``None`` have no ONNX default (required, or meaningful only
when given). ``MeanSquaredError`` is d5's own operator, not ONNX's.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from d5core.errors import UsageError
from d5core.onnx.checks import InputSlot

__all__ = ["OperatorSignature", "onnx_signature"]


class OperatorSignature(NamedTuple):
    """The inputs of an operator, in ONNX order, and its attributes with their defaults."""

    slots: tuple[InputSlot, ...]
    attribute_defaults: Mapping[str, Any]


def _signature(slots: tuple[InputSlot, ...], defaults: dict[str, Any]) -> OperatorSignature:
    return OperatorSignature(slots, MappingProxyType(dict(defaults)))


#: The window attributes of Conv and ConvTranspose.
_CONV_ATTRIBUTES: dict[str, Any] = {
    "auto_pad": "NOTSET",
    "dilations": None,
    "group": 1,
    "kernel_shape": None,
    "pads": None,
    "strides": None,
}
#: The window attributes of MaxPool and AveragePool.
_POOL_ATTRIBUTES: dict[str, Any] = {
    **{k: v for k, v in _CONV_ATTRIBUTES.items() if k != "group"},
    "ceil_mode": 0,
}
#: The inputs LSTM and GRU share (LSTM adds initial_c and P).
_RECURRENT_INPUTS = (
    InputSlot("X"),
    InputSlot("W"),
    InputSlot("R"),
    InputSlot("B", optional=True),
    InputSlot("sequence_lens", kind="index", optional=True),
    InputSlot("initial_h", optional=True),
)
#: The attributes LSTM and GRU share.
_RECURRENT_ATTRIBUTES: dict[str, Any] = {
    "activation_alpha": None,
    "activation_beta": None,
    "activations": None,
    "clip": None,
    "direction": "forward",
    "hidden_size": None,
    "layout": 0,
}

_SIGNATURES: dict[str, OperatorSignature] = {
    "Gemm": _signature(
        (InputSlot("A"), InputSlot("B"), InputSlot("C", optional=True)),
        {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
    ),
    "MatMul": _signature(
        (InputSlot("A"), InputSlot("B")),
        {},
    ),
    "Conv": _signature(
        (InputSlot("X"), InputSlot("W"), InputSlot("B", optional=True)),
        _CONV_ATTRIBUTES,
    ),
    "ConvTranspose": _signature(
        (InputSlot("X"), InputSlot("W"), InputSlot("B", optional=True)),
        {**_CONV_ATTRIBUTES, "output_padding": None, "output_shape": None},
    ),
    "Relu": _signature(
        (InputSlot("X"),),
        {},
    ),
    "LeakyRelu": _signature(
        (InputSlot("X"),),
        {"alpha": 0.01},
    ),
    "Sigmoid": _signature(
        (InputSlot("X"),),
        {},
    ),
    "Tanh": _signature(
        (InputSlot("X"),),
        {},
    ),
    "Softmax": _signature(
        (InputSlot("X"),),
        {"axis": -1},
    ),
    "LogSoftmax": _signature(
        (InputSlot("X"),),
        {"axis": -1},
    ),
    "MaxPool": _signature(
        (InputSlot("X"),),
        {**_POOL_ATTRIBUTES, "storage_order": 0},
    ),
    "AveragePool": _signature(
        (InputSlot("X"),),
        {**_POOL_ATTRIBUTES, "count_include_pad": 0},
    ),
    "GlobalAveragePool": _signature(
        (InputSlot("X"),),
        {},
    ),
    "BatchNormalization": _signature(
        (
            InputSlot("X"),
            InputSlot("scale"),
            InputSlot("B"),
            InputSlot("input_mean"),
            InputSlot("input_var"),
        ),
        {"epsilon": 1e-05, "momentum": 0.9, "training_mode": 0},
    ),
    "Dropout": _signature(
        (
            InputSlot("data"),
            InputSlot("ratio", kind="static", optional=True),
            InputSlot("training_mode", kind="static", optional=True),
        ),
        {"seed": 0, "ratio": 0.5, "training_mode": 0},
    ),
    "Add": _signature(
        (InputSlot("A"), InputSlot("B")),
        {},
    ),
    "Sub": _signature(
        (InputSlot("A"), InputSlot("B")),
        {},
    ),
    "Mul": _signature(
        (InputSlot("A"), InputSlot("B")),
        {},
    ),
    "Div": _signature(
        (InputSlot("A"), InputSlot("B")),
        {},
    ),
    "Sum": _signature(
        (InputSlot("data_0", variadic=True),),
        {},
    ),
    "Reshape": _signature(
        (InputSlot("data"), InputSlot("shape", kind="static", integer=True)),
        {"allowzero": 0},
    ),
    "Flatten": _signature(
        (InputSlot("input"),),
        {"axis": 1},
    ),
    "Transpose": _signature(
        (InputSlot("data"),),
        {"perm": None},
    ),
    "Concat": _signature(
        (InputSlot("inputs", variadic=True),),
        {"axis": None},
    ),
    "Squeeze": _signature(
        (InputSlot("data"), InputSlot("axes", kind="static", optional=True, integer=True)),
        {},
    ),
    "Unsqueeze": _signature(
        (InputSlot("data"), InputSlot("axes", kind="static", optional=True, integer=True)),
        {},
    ),
    "Identity": _signature(
        (InputSlot("input"),),
        {},
    ),
    "SoftmaxCrossEntropyLoss": _signature(
        (
            InputSlot("scores"),
            InputSlot("labels", kind="index"),
            InputSlot("weights", optional=True, differentiable=False),
        ),
        {"ignore_index": None, "reduction": "mean"},
    ),
    "MeanSquaredError": _signature(
        (InputSlot("prediction"), InputSlot("target")),
        {"reduction": "mean"},
    ),
    # -- transformer operators: indexing, comparisons, math, reductions --
    "Gather": _signature(
        (InputSlot("data"), InputSlot("indices", kind="index")),
        {"axis": 0},
    ),
    "GatherElements": _signature(
        (InputSlot("data"), InputSlot("indices", kind="index")),
        {"axis": 0},
    ),
    "Slice": _signature(
        (
            InputSlot("data"),
            InputSlot("starts", kind="static", integer=True),
            InputSlot("ends", kind="static", integer=True),
            InputSlot("axes", kind="static", optional=True, integer=True),
            InputSlot("steps", kind="static", optional=True, integer=True),
        ),
        {},
    ),
    "Shape": _signature(
        (InputSlot("data", differentiable=False),),
        {"start": 0, "end": None},
    ),
    "ConstantOfShape": _signature(
        (InputSlot("input", kind="static", integer=True),),
        {"value": None},
    ),
    "Expand": _signature(
        (InputSlot("input"), InputSlot("shape", kind="static", integer=True)),
        {},
    ),
    "Where": _signature(
        (InputSlot("condition", kind="bool"), InputSlot("X"), InputSlot("Y")),
        {},
    ),
    **{
        op: _signature(
            (InputSlot("A", differentiable=False), InputSlot("B", differentiable=False)), {}
        )
        for op in ("Equal", "Less", "Greater")
    },
    "Cast": _signature(
        (InputSlot("input"),),
        {"to": None, "saturate": 1, "round_mode": "up"},
    ),
    "Pow": _signature(
        (InputSlot("X"), InputSlot("Y")),
        {},
    ),
    "Sqrt": _signature((InputSlot("X"),), {}),
    "Erf": _signature((InputSlot("input"),), {}),
    "Exp": _signature((InputSlot("input"),), {}),
    "Log": _signature((InputSlot("input"),), {}),
    "Gelu": _signature(
        (InputSlot("X"),),
        {"approximate": "none"},
    ),
    # Axes are an input since opset 13 (ReduceSum) and 18 (the others), an attribute
    # before; both forms are accepted, one at a time.
    **{
        op: _signature(
            (InputSlot("data"), InputSlot("axes", kind="static", optional=True, integer=True)),
            {"axes": None, "keepdims": 1, "noop_with_empty_axes": 0},
        )
        for op in ("ReduceMean", "ReduceSum", "ReduceMax")
    },
    "LayerNormalization": _signature(
        (InputSlot("X"), InputSlot("Scale"), InputSlot("B", optional=True)),
        {"axis": -1, "epsilon": 1e-05, "stash_type": 1},
    ),
    # split is an input since opset 13 (an attribute before); num_outputs since 18
    "Split": _signature(
        (InputSlot("input"), InputSlot("split", kind="static", optional=True, integer=True)),
        {"axis": 0, "num_outputs": None},
    ),
    "Trilu": _signature(
        (InputSlot("input"), InputSlot("k", kind="static", optional=True, integer=True)),
        {"upper": 1},
    ),
    # -- recurrent layers (LSTM, GRU) --
    "LSTM": _signature(
        (
            *_RECURRENT_INPUTS,
            InputSlot("initial_c", optional=True),
            InputSlot("P", optional=True),
        ),
        {**_RECURRENT_ATTRIBUTES, "input_forget": 0},
    ),
    "GRU": _signature(_RECURRENT_INPUTS, {**_RECURRENT_ATTRIBUTES, "linear_before_reset": 0}),
}


def onnx_signature(op_type: str) -> OperatorSignature:
    """The signature of ``op_type``; a ``UsageError`` naming the known ones if unknown."""
    try:
        return _SIGNATURES[op_type]
    except KeyError:
        known = ", ".join(sorted(_SIGNATURES))
        raise UsageError(f"no ONNX signature for operator {op_type!r}; known: {known}") from None
