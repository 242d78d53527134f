"""Every torch operator, forward and backward, against d5's numpy reference.

Each test draws shapes and attributes with hypothesis and runs
:func:`d5core.validate.validate_operator`: the outputs and the backward are compared with
the reference's, and the backward is checked by central differences in float64. Data is
chosen away from kinks (ReLU at 0, ties in a max-pooling window) where a one-sided
derivative is as right as any other.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from d5_plugin_numpy import backend as reference
from d5_plugin_torch.operators import TorchBackend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from d5core.levels.operators import TensorDescriptor
from d5core.runners import operators as runner
from d5core.validate import validate_operator
from d5core.workloads import problems

TORCH = TorchBackend()
NUMPY = reference.NumpyBackend()

#: Few examples (D5_PROPERTY_EXAMPLES for more), no deadline, the same ones every run.
PROPERTY = settings(
    max_examples=int(os.environ.get("D5_PROPERTY_EXAMPLES", "20")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
AUTO_PADS = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors gain nothing from threads, and on a shared 2-core machine torch's
    spinning workers can make each call a thousand times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def assert_matches_reference(
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[np.ndarray],
    dtype: str,
    **kwargs: Any,
) -> None:
    """Validate torch's ``op_type`` against the reference; floating inputs take ``dtype``."""
    arrays = [
        np.asarray(x, dtype=dtype) if np.asarray(x).dtype.kind == "f" else np.asarray(x)
        for x in inputs
    ]
    descriptors = [TensorDescriptor.of(a) for a in arrays]
    candidate = TORCH.create(op_type, attributes, descriptors)
    expected = NUMPY.create(op_type, attributes, descriptors)
    report = validate_operator(candidate, expected, arrays, **kwargs)
    problem = f"{op_type} {dict(attributes)} on {[a.shape for a in arrays]} ({dtype})"
    assert report.passed, f"{problem}: " + "; ".join(report.failures())
    assert report.outputs, problem
    compared = [g for g in report.gradients if g.method == "reference" and not g.skipped]
    checked = [g for g in report.gradients if g.method != "reference" and not g.skipped]
    assert compared and checked, f"{problem}: no gradient was compared or checked"


def rng_of(data: st.DataObject) -> np.random.Generator:
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))


def normal(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    return rng.standard_normal(tuple(shape))


def away_from_zero(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    x = rng.standard_normal(tuple(shape))
    return np.where(x >= 0, x + 0.1, x - 0.1)


def distinct(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Values 0.1 apart, so that no pooling window holds a tie."""
    n = math.prod(shape)
    return (rng.permutation(n) * 0.1 - n * 0.05).reshape(tuple(shape))


def broadcastable(data: st.DataObject, full: Sequence[int]) -> tuple[int, ...]:
    """A shape that broadcasts to ``full``: a suffix of it with some sizes set to 1."""
    rank = data.draw(st.integers(0, len(full)))
    suffix = full[len(full) - rank :]
    return tuple(1 if data.draw(st.booleans()) else d for d in suffix)


def small(n: int) -> st.SearchStrategy[int]:
    return st.integers(1, n)


# -- matrix products ----------------------------------------------------------------


@DTYPES
@PROPERTY
@given(data=st.data())
def test_gemm(data: st.DataObject, dtype: str) -> None:
    m, k, n = data.draw(small(4)), data.draw(small(4)), data.draw(small(4))
    trans_a, trans_b = data.draw(st.booleans()), data.draw(st.booleans())
    attributes = {
        "alpha": data.draw(st.sampled_from([1.0, 0.5, -2.0])),
        "beta": data.draw(st.sampled_from([1.0, 0.25, 0.0])),
        "transA": int(trans_a),
        "transB": int(trans_b),
    }
    c_shape = data.draw(st.sampled_from([None, (m, n), (n,), (1, n), (m, 1), ()]))
    rng = rng_of(data)
    inputs = [
        normal(rng, (k, m) if trans_a else (m, k)),
        normal(rng, (n, k) if trans_b else (k, n)),
    ]
    if c_shape is not None:
        inputs.append(normal(rng, c_shape))
    assert_matches_reference("Gemm", attributes, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_matmul(data: st.DataObject, dtype: str) -> None:
    k = data.draw(small(4))
    batch = data.draw(st.lists(small(3), max_size=2))
    a_vector, b_vector = data.draw(st.booleans()), data.draw(st.booleans())
    a = (k,) if a_vector else (*broadcastable(data, batch), data.draw(small(3)), k)
    b = (k,) if b_vector else (*broadcastable(data, batch), k, data.draw(small(3)))
    rng = rng_of(data)
    assert_matches_reference("MatMul", {}, [normal(rng, a), normal(rng, b)], dtype)


# -- convolutions -------------------------------------------------------------------


def conv_geometry(data: st.DataObject, rank: int) -> tuple[list[int], list[int], list[int]]:
    """Kernel, strides and dilations for ``rank`` spatial axes (smaller in 3-D)."""
    top = 2 if rank == 3 else 3
    kernel = [data.draw(small(top)) for _ in range(rank)]
    strides = [data.draw(small(2)) for _ in range(rank)]
    dilations = [data.draw(small(2)) for _ in range(rank)]
    return kernel, strides, dilations


@DTYPES
@PROPERTY
@given(data=st.data())
def test_conv(data: st.DataObject, dtype: str) -> None:
    rank = data.draw(st.integers(1, 3))
    group = data.draw(small(2))
    c, m = group * data.draw(small(2)), group * data.draw(small(2))
    kernel, strides, dilations = conv_geometry(data, rank)
    attributes: dict[str, Any] = {
        "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
        "group": group,
        "strides": strides,
        "dilations": dilations,
        "kernel_shape": kernel,
    }
    if attributes["auto_pad"] == "NOTSET":
        attributes["pads"] = [data.draw(st.integers(0, 2)) for _ in range(2 * rank)]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    sizes = [e + data.draw(st.integers(0, 2 if rank == 3 else 3)) for e in extents]
    rng = rng_of(data)
    inputs = [normal(rng, (data.draw(small(2)), c, *sizes)), normal(rng, (m, c // group, *kernel))]
    if data.draw(st.booleans()):
        inputs.append(normal(rng, (m,)))
    assert_matches_reference("Conv", attributes, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_conv_transpose(data: st.DataObject, dtype: str) -> None:
    rank = data.draw(st.integers(1, 3))
    group = data.draw(small(2))
    c, m = group * data.draw(small(2)), group * data.draw(small(2))
    kernel, strides, dilations = conv_geometry(data, rank)
    sizes = [data.draw(small(2 if rank == 3 else 3)) for _ in range(rank)]
    output_padding = [
        data.draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilations, strict=True)
    ]
    full = [
        s * (i - 1) + p + (k - 1) * d + 1
        for s, i, p, k, d in zip(strides, sizes, output_padding, kernel, dilations, strict=True)
    ]
    attributes: dict[str, Any] = {
        "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
        "group": group,
        "strides": strides,
        "dilations": dilations,
        "output_padding": output_padding,
    }
    if attributes["auto_pad"] == "NOTSET":
        if data.draw(st.booleans()):
            attributes["output_shape"] = [f + data.draw(st.integers(-2, 1)) for f in full]
            attributes["output_shape"] = [max(1, o) for o in attributes["output_shape"]]
        else:
            pads = [data.draw(st.integers(0, 2)) for _ in range(2 * rank)]
            pads = [min(p, (f - 1) // 2) for p, f in zip(pads, full * 2, strict=True)]
            attributes["pads"] = pads
    rng = rng_of(data)
    inputs = [normal(rng, (data.draw(small(2)), c, *sizes)), normal(rng, (c, m // group, *kernel))]
    if data.draw(st.booleans()):
        inputs.append(normal(rng, (m,)))
    assert_matches_reference("ConvTranspose", attributes, inputs, dtype)


# -- pooling ------------------------------------------------------------------------


def pool_problem(data: st.DataObject, dilated: bool = True) -> tuple[dict[str, Any], list[int]]:
    """Attributes and an input shape. Pads stay within the dilated kernel's reach
    (``(k - 1) * d``) so that no window lies wholly in padding."""
    rank = data.draw(st.integers(1, 3))
    top = 2 if rank == 3 else 3
    kernel = [data.draw(small(top)) for _ in range(rank)]
    strides = [data.draw(small(3)) for _ in range(rank)]
    dilations = [data.draw(small(2)) if dilated else 1 for _ in range(rank)]
    attributes: dict[str, Any] = {
        "kernel_shape": kernel,
        "strides": strides,
        "dilations": dilations,
        "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
        "ceil_mode": int(data.draw(st.booleans())),
    }
    if attributes["auto_pad"] == "NOTSET":
        reach = [(k - 1) * d for k, d in zip(kernel, dilations, strict=True)] * 2
        attributes["pads"] = [data.draw(st.integers(0, min(r, 2))) for r in reach]
    sizes = [
        (k - 1) * d + 1 + data.draw(st.integers(0, 3))
        for k, d in zip(kernel, dilations, strict=True)
    ]
    return attributes, [data.draw(small(2)), data.draw(small(2)), *sizes]


@DTYPES
@PROPERTY
@given(data=st.data())
def test_max_pool(data: st.DataObject, dtype: str) -> None:
    attributes, shape = pool_problem(data)
    attributes["storage_order"] = int(data.draw(st.booleans()))
    assert_matches_reference("MaxPool", attributes, [distinct(rng_of(data), shape)], dtype)


@DTYPES
def test_max_pool_indices_when_a_begin_pad_and_an_end_crop_cancel(dtype: str) -> None:
    """Padded and unpadded widths are equal here, yet torch's indices are shifted."""
    attributes = {"kernel_shape": [1, 2], "strides": [1, 2], "pads": [0, 1, 0, 0]}
    for x in ([[[[0.5, -0.5]]]], [[[[-0.5, 0.5]]]]):
        assert_matches_reference("MaxPool", attributes, [np.array(x)], dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_average_pool(data: st.DataObject, dtype: str) -> None:
    attributes, shape = pool_problem(data)
    attributes["count_include_pad"] = int(data.draw(st.booleans()))
    assert_matches_reference("AveragePool", attributes, [normal(rng_of(data), shape)], dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_global_average_pool(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), min_size=3, max_size=5))
    assert_matches_reference("GlobalAveragePool", {}, [normal(rng_of(data), shape)], dtype)


# -- activations --------------------------------------------------------------------


@DTYPES
@pytest.mark.parametrize("op_type", ["Relu", "LeakyRelu", "Sigmoid", "Tanh"])
@PROPERTY
@given(data=st.data())
def test_elementwise_activation(data: st.DataObject, op_type: str, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), max_size=3))
    attributes = {}
    if op_type == "LeakyRelu" and data.draw(st.booleans()):
        attributes["alpha"] = data.draw(st.sampled_from([0.2, -0.5, 1.5]))
    inputs = [away_from_zero(rng_of(data), shape) * 2]
    assert_matches_reference(op_type, attributes, inputs, dtype)


@DTYPES
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@PROPERTY
@given(data=st.data())
def test_softmax(data: st.DataObject, op_type: str, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), min_size=1, max_size=3))
    attributes = {}
    if data.draw(st.booleans()):
        attributes["axis"] = data.draw(st.integers(-len(shape), len(shape) - 1))
    assert_matches_reference(op_type, attributes, [normal(rng_of(data), shape) * 3], dtype)


# -- normalization and dropout ------------------------------------------------------


@DTYPES
@PROPERTY
@given(data=st.data())
def test_batch_normalization(data: st.DataObject, dtype: str) -> None:
    c = data.draw(small(3))
    shape = [data.draw(small(3)), c, *data.draw(st.lists(small(3), max_size=2))]
    attributes = {
        "training_mode": int(data.draw(st.booleans())),
        "momentum": data.draw(st.sampled_from([0.9, 0.5, 0.0])),
        "epsilon": data.draw(st.sampled_from([1e-5, 1e-2])),
    }
    rng = rng_of(data)
    positive = rng.uniform(0.5, 1.5, (2, c))
    inputs = [normal(rng, shape), positive[0], normal(rng, (c,)), normal(rng, (c,)), positive[1]]
    assert_matches_reference("BatchNormalization", attributes, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_dropout_where_it_is_deterministic(data: st.DataObject, dtype: str) -> None:
    """Inference, or training with ratio 0: the output is the input and the mask all
    true, so the reference's numpy random stream does not come in (see
    test_operators_dropout.py for training-mode masks)."""
    shape = data.draw(st.lists(small(4), max_size=3))
    rng = rng_of(data)
    inputs = [normal(rng, shape)]
    ratio = data.draw(st.sampled_from([0.0, 0.3, 0.5]))
    training = ratio == 0.0 and data.draw(st.booleans())
    attributes: dict[str, Any] = {"seed": data.draw(st.integers(0, 99))}
    if data.draw(st.booleans()):
        inputs += [np.array(ratio, dtype=dtype), np.array(training)]
    else:
        attributes.update(ratio=ratio, training_mode=int(training))
    assert_matches_reference("Dropout", attributes, inputs, dtype)


# -- element-wise arithmetic --------------------------------------------------------


@DTYPES
@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div"])
@PROPERTY
@given(data=st.data())
def test_binary_arithmetic(data: st.DataObject, op_type: str, dtype: str) -> None:
    full = data.draw(st.lists(small(3), max_size=3))
    a, b = broadcastable(data, full), broadcastable(data, full)
    if data.draw(st.booleans()):
        a, b = tuple(full), b
    rng = rng_of(data)
    divisor = away_from_zero(rng, b) * 2 if op_type == "Div" else normal(rng, b)
    assert_matches_reference(op_type, {}, [normal(rng, a), divisor], dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_sum(data: st.DataObject, dtype: str) -> None:
    full = data.draw(st.lists(small(3), max_size=3))
    count = data.draw(st.integers(1, 4))
    shapes = [tuple(full)] + [broadcastable(data, full) for _ in range(count - 1)]
    rng = rng_of(data)
    assert_matches_reference("Sum", {}, [normal(rng, s) for s in shapes], dtype)


# -- shapes -------------------------------------------------------------------------


@DTYPES
@PROPERTY
@given(data=st.data())
def test_reshape(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), min_size=1, max_size=3))
    total = math.prod(shape)
    factors = [f for f in range(1, total + 1) if total % f == 0]
    first = data.draw(st.sampled_from(factors))
    target = [first, total // first]
    if data.draw(st.booleans()):
        target[data.draw(st.integers(0, 1))] = -1
    allowzero = int(data.draw(st.booleans()))
    if not allowzero:
        target = [0 if i < len(shape) and t == shape[i] else t for i, t in enumerate(target)]
    inputs = [normal(rng_of(data), shape), np.array(target, dtype=np.int64)]
    assert_matches_reference("Reshape", {"allowzero": allowzero}, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_flatten(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), min_size=1, max_size=4))
    axis = data.draw(st.integers(-len(shape), len(shape)))
    assert_matches_reference("Flatten", {"axis": axis}, [normal(rng_of(data), shape)], dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_transpose(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), min_size=1, max_size=4))
    perm = data.draw(st.none() | st.permutations(list(range(len(shape)))))
    attributes = {} if perm is None else {"perm": perm}
    assert_matches_reference("Transpose", attributes, [normal(rng_of(data), shape)], dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_concat(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), min_size=1, max_size=3))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = rng_of(data)
    inputs = []
    for _ in range(data.draw(st.integers(1, 3))):
        part = list(shape)
        part[axis] = data.draw(small(3))
        inputs.append(normal(rng, part))
    assert_matches_reference("Concat", {"axis": axis}, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_squeeze(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    ones = [i for i, d in enumerate(shape) if d == 1]
    inputs = [normal(rng_of(data), shape)]
    if ones and data.draw(st.booleans()):
        axes = data.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
        axes = [a - len(shape) if data.draw(st.booleans()) else a for a in axes]
        inputs.append(np.array(axes, dtype=np.int64))
    assert_matches_reference("Squeeze", {}, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_unsqueeze(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), max_size=3))
    count = data.draw(st.integers(1, 2))
    rank = len(shape) + count
    axes = data.draw(
        st.lists(st.integers(0, rank - 1), min_size=count, max_size=count, unique=True)
    )
    axes = [a - rank if data.draw(st.booleans()) else a for a in axes]
    inputs = [normal(rng_of(data), shape), np.array(axes, dtype=np.int64)]
    assert_matches_reference("Unsqueeze", {}, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_identity(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), max_size=3))
    assert_matches_reference("Identity", {}, [normal(rng_of(data), shape)], dtype)


# -- losses -------------------------------------------------------------------------


@DTYPES
@PROPERTY
@given(data=st.data())
def test_softmax_cross_entropy_loss(data: st.DataObject, dtype: str) -> None:
    n, c = data.draw(small(3)), data.draw(st.integers(2, 4))
    extra = data.draw(st.lists(small(2), max_size=2))
    rng = rng_of(data)
    labels = rng.integers(0, c, (n, *extra))
    attributes: dict[str, Any] = {"reduction": data.draw(st.sampled_from(["mean", "sum", "none"]))}
    ignore = data.draw(st.none() | st.integers(-1, c - 1))
    if ignore is not None:
        attributes["ignore_index"] = ignore
        labels[rng.random(labels.shape) < 0.3] = ignore
        labels.reshape(-1)[0] = (ignore + 1) % c  # at least one label counts
    inputs = [normal(rng, (n, c, *extra)), labels]
    if data.draw(st.booleans()):
        inputs.append(rng.uniform(0.5, 1.5, c))
    assert_matches_reference("SoftmaxCrossEntropyLoss", attributes, inputs, dtype)


@DTYPES
@PROPERTY
@given(data=st.data())
def test_mean_squared_error(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), max_size=3))
    reduction = data.draw(st.sampled_from(["mean", "sum", "none"]))
    rng = rng_of(data)
    inputs = [normal(rng, shape), normal(rng, shape)]
    assert_matches_reference("MeanSquaredError", {"reduction": reduction}, inputs, dtype)


# -- coverage -----------------------------------------------------------------------


def test_every_reference_operator_is_implemented_and_tested() -> None:
    tested = {
        "Gemm", "MatMul", "Conv", "ConvTranspose", "MaxPool", "AveragePool",
        "GlobalAveragePool", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax",
        "BatchNormalization", "Dropout", "Add", "Sub", "Mul", "Div", "Sum", "Reshape",
        "Flatten", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Identity",
        "SoftmaxCrossEntropyLoss", "MeanSquaredError",
    }  # fmt: skip
    assert set(TORCH.supported()) == set(NUMPY.supported()) == tested


@DTYPES
def test_reshape_with_allowzero_keeps_a_literal_zero(dtype: str) -> None:
    inputs = [np.zeros((0, 3), dtype=dtype), np.array([3, 0])]
    descriptors = [TensorDescriptor.of(a) for a in inputs]
    candidate = TORCH.create("Reshape", {"allowzero": 1}, descriptors)
    expected = NUMPY.create("Reshape", {"allowzero": 1}, descriptors)
    report = validate_operator(candidate, expected, inputs, gradcheck=False)
    assert report.passed, report.failures()
    assert candidate.forward(inputs)[0].shape == (3, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_d5_validates_every_default_problem_on_torch(dtype: str) -> None:
    """The path of ``d5 validate op --backend torch``: the backend loaded by name from
    the ``d5.operators`` group, each operator's default problem, the numpy reference."""
    failed = {}
    for op_type, problem in problems.DEFAULT_PROBLEMS.items():
        result = runner.validate_op(problem, "torch", dtype=dtype)
        assert result.against == "numpy"
        if not result.passed:
            failed[op_type] = result.report.failures()
    assert not failed
    assert set(problems.DEFAULT_PROBLEMS) == set(TORCH.supported())
