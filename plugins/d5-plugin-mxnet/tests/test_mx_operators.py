"""Every MXNet operator, forward and backward, in float32 and float64, against d5's
numpy reference.

The shared kit (:class:`d5core.testing.operator_agreement.OperatorAgreementTests`) draws
shapes, attributes and data away from kinks with hypothesis for each operator and runs
:func:`d5core.validate.validate_operator` on them (``D5_PROPERTY_EXAMPLES`` draws more
examples). MXNet 1.9 reads an axis of size 0 as unknown, so such tensors are refused;
what MXNet's own arguments cannot express, and its 0-d arrays, are fixed cases below.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet.operators import MXNetBackend
from d5_plugin_mxnet.ops.transformer import TRANSFORMER_OPERATORS

from d5core.api import TensorDescriptor, UsageError
from d5core.testing.operator_agreement import (
    assert_agrees_with_reference,
    distinct,
    property_examples,
)
from d5core.testing.transformer_graphs import CNNOperatorTests

MX = MXNetBackend()
BACKENDS = pytest.mark.parametrize("backend", [MX], ids=lambda b: b.name)
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])


#: The operators of convolutional networks; the transformer and recurrent ones have a
#: kit subclass of their own (test_mx_transformer_ops.py).
CNN_OPERATORS = sorted(set(MX.supported()) - {cls.op_type for cls in TRANSFORMER_OPERATORS})


#: Where MXNet's kernels differ from numpy on NaN (issue 28): making them agree would cost
#: a second pass over every input inside the timed region, so the cases are declared.
MX_NONFINITE_DIFFERENCES = MappingProxyType(
    {
        ("MaxPool", "nan at .* of the window"): (
            "MXNet's pooling kernel compares with >, so a NaN never wins a window: the "
            "window's largest number is returned where numpy gives NaN"
        ),
        ("Softmax", r"(nan|\+inf) at .* of a row", "float32"): (
            "MXNet's float32 softmax takes the row maximum ignoring NaN: a row with NaN or "
            "+inf gives 0 where numpy gives NaN (float64 agrees)"
        ),
        ("LogSoftmax", r"(nan|\+inf) at .* of a row", "float32"): (
            "as Softmax: a float32 row with NaN or +inf gives finite values or -inf where "
            "numpy gives NaN (float64 agrees)"
        ),
    }
)


class TestMXNetAgreesWithTheReference(CNNOperatorTests):
    backend = MX
    operators = CNN_OPERATORS
    nonfinite_differences = MX_NONFINITE_DIFFERENCES

    examples = property_examples(6)
    default_problem_dtypes = ("float32",)
    zero_size_tensors = False


def test_conv_transpose_with_an_output_shape_within_the_output_padding() -> None:
    """The crop (from output_shape) and the output padding fall on the two ends of a
    size-1 axis: padding first keeps the intermediate array from being empty, which
    MXNet cannot hold ('src_idx < dshape_len' before)."""
    attributes = {"strides": [1], "dilations": [2], "output_padding": [1], "output_shape": [1]}
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 1, 1)), rng.standard_normal((1, 1, 1))]
    assert_agrees_with_reference(MX, "ConvTranspose", attributes, inputs, "float64")


@BACKENDS
@pytest.mark.parametrize(
    ("op_type", "attributes", "shapes"),
    [
        ("Conv", {"group": 2, "pads": [1, 0, 0, 2]}, [(2, 4, 5, 5), (6, 2, 3, 2), (6,)]),
        ("Conv", {"group": 2, "strides": [2, 1, 1]}, [(1, 2, 4, 3, 3), (2, 1, 2, 2, 2)]),
        ("Conv", {"dilations": [2, 1, 2], "pads": [1] * 6}, [(1, 2, 5, 4, 5), (3, 2, 2, 2, 2)]),
        ("ConvTranspose", {"group": 2, "strides": [2, 2]}, [(1, 4, 3, 3), (4, 1, 3, 2)]),
        (
            "ConvTranspose",
            {"strides": [2], "output_padding": [1], "output_shape": [9]},
            [(1, 2, 3), (2, 2, 2)],
        ),
        ("ConvTranspose", {"pads": [1, 0, 2, 1, 0, 1]}, [(1, 2, 3, 3, 3), (2, 2, 3, 2, 2)]),
        ("MaxPool", {"kernel_shape": [2, 2, 2], "pads": [1, 0, 0, 0, 1, 1]}, [(1, 2, 3, 4, 3)]),
        ("AveragePool", {"kernel_shape": [2, 2, 2], "strides": [2, 1, 1]}, [(1, 2, 4, 3, 3)]),
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
            [(2, 2, 5, 5)],
        ),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "",
)
def test_compositions_of_mxnet_calls_match_the_reference(
    backend: MXNetBackend, op_type: str, attributes: dict[str, Any], shapes: list[Any]
) -> None:
    """The cases MXNet's own arguments cannot express and the kernel composes (explicit
    asymmetric pads in 1-D to 3-D, an output larger than the transposed convolution's,
    pads cropped off a 3-D deconvolution, 3-D pools with pads), in float64."""
    rng = np.random.default_rng(0)
    inputs = [distinct(rng, s) if op_type == "MaxPool" else rng.standard_normal(s) for s in shapes]
    assert_agrees_with_reference(backend, op_type, attributes, inputs, "float64")


@BACKENDS
@DTYPES
def test_zero_size_axes_are_refused_in_one_line(backend: MXNetBackend, dtype: str) -> None:
    """MXNet 1.9's arrays read an axis of size 0 as unknown: such inputs and targets are
    refused up front, naming the input and the fix."""
    with pytest.raises(UsageError, match=r"^Relu: input X has shape \(0, 3\): MXNet 1\.9"):
        backend.create("Relu", {}, [TensorDescriptor((0, 3), dtype)])
    descriptors = [TensorDescriptor((0, 3), dtype), TensorDescriptor((2,), "int64")]
    with pytest.raises(UsageError, match=r"^Reshape: input data has shape \(0, 3\)"):
        backend.create("Reshape", {"allowzero": 1}, descriptors)


@BACKENDS
@DTYPES
@pytest.mark.parametrize("op_type", ["Relu", "Add", "Sum", "Identity", "Dropout", "MatMul"])
def test_zero_dimensional_inputs_and_outputs_keep_their_shape(
    backend: MXNetBackend, dtype: str, op_type: str
) -> None:
    """MXNet holds a 0-d array as shape (1,); what d5 gets back is 0-d again."""
    rng = np.random.default_rng(3)
    arity = {"Add": 2, "Sum": 3}.get(op_type, 1)
    inputs = [rng.standard_normal(()) + 0.5 for _ in range(arity)]
    if op_type == "MatMul":
        inputs = [rng.standard_normal(3), rng.standard_normal(3)]
    assert_agrees_with_reference(backend, op_type, {}, inputs, dtype)
    op = backend.create(op_type, {}, [TensorDescriptor.of(np.asarray(x, dtype)) for x in inputs])
    assert op.forward([np.asarray(x, dtype) for x in inputs])[0].shape == ()


@pytest.mark.parametrize(
    ("op_type", "attributes", "shapes", "expected"),
    [
        ("Conv", {"group": 0}, [(1, 2, 5, 5), (2, 2, 3, 3)], "group must be positive"),
        ("Conv", {"kernel_shape": [2, 2]}, [(1, 2, 5, 5), (2, 2, 3, 3)], "kernel_shape"),
        ("Conv", {"auto_pad": "SAME"}, [(1, 2, 5, 5), (2, 2, 3, 3)], "auto_pad"),
        ("MaxPool", {}, [(1, 2, 5, 5)], "kernel_shape is required"),
        ("MaxPool", {"kernel_shape": [2, 2], "storage_order": 2}, [(1, 1, 4, 4)], "storage_order"),
        ("SoftmaxCrossEntropyLoss", {"reduction": "max"}, [(2, 3), (2,)], "reduction"),
        ("Softmax", {"axis": 3}, [(2, 3)], "axis 3 is out of range"),
        ("Gemm", {}, [(2, 3), (4, 5)], "Gemm"),
        ("Relu", {"alpha": 1.0}, [(2, 3)], "alpha"),
    ],
)
def test_bad_attributes_and_shapes_are_one_line_usage_errors(
    op_type: str, attributes: dict[str, Any], shapes: list[Any], expected: str
) -> None:
    descriptors = [
        TensorDescriptor(s, "int64" if op_type.startswith("Softmax") and i == 1 else "float32")
        for i, s in enumerate(shapes)
    ]
    with pytest.raises(UsageError) as excinfo:
        MX.create(op_type, attributes, descriptors)
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith(f"{op_type}: ") and expected in message


def test_errors_mxnet_raises_become_one_line_usage_errors() -> None:
    """A shape MXNet itself rejects (d5's own check switched off to let it through)
    comes back as one line naming the shapes and MXNet's reason, without its C++ trace."""
    a, b = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)
    op = MX.create("Gemm", {}, [TensorDescriptor((2, 3)), TensorDescriptor((3, 5))])
    op.check = lambda sig: None  # type: ignore[method-assign]
    with pytest.raises(UsageError) as excinfo:
        op.prepare_forward([a, b])()
    message = str(excinfo.value)
    assert message.startswith("Gemm: mxnet rejected inputs of shapes (2, 3), (4, 5): ")
    assert "\n" not in message and "Traceback" not in message and "[bt]" not in message
