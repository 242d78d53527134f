"""Every MXNet operator, forward and backward, in float32 and float64, against d5's
numpy reference.

Each test draws shapes and attributes with hypothesis and runs
:func:`d5core.validate.validate_operator`: the outputs and the backward are compared with
the reference's, and the backward is checked by central differences in float64. Data is
chosen away from kinks (ReLU at 0, ties in a max-pooling window) where a one-sided
derivative is as right as any other (``D5_PROPERTY_EXAMPLES`` draws more examples).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet.operators import MXNetBackend
from d5_plugin_numpy import backend as reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from d5core.errors import UsageError
from d5core.levels.operators import TensorDescriptor
from d5core.runners import operators as runner
from d5core.validate import validate_operator
from d5core.workloads import problems

MX = MXNetBackend()
NUMPY = reference.NumpyBackend()

#: Examples per property: few, the same ones every run.
EXAMPLES = {"mxnet": int(os.environ.get("D5_PROPERTY_EXAMPLES", "6"))}
BACKENDS = pytest.mark.parametrize("backend", [MX], ids=lambda b: b.name)
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
AUTO_PADS = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]

Case = Callable[[st.DataObject, MXNetBackend, str], None]


def check_property(case: Case, backend: MXNetBackend, dtype: str) -> None:
    """Run ``case`` on the examples hypothesis draws, as many as ``backend`` gets."""

    @settings(
        max_examples=EXAMPLES[backend.name],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case(data, backend, dtype)

    run()


def assert_matches_reference(
    backend: MXNetBackend,
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[np.ndarray],
    dtype: str,
    **kwargs: Any,
) -> None:
    """Validate ``backend``'s ``op_type`` against the reference; floating inputs take
    ``dtype``."""
    arrays = [
        np.asarray(x, dtype=dtype) if np.asarray(x).dtype.kind == "f" else np.asarray(x)
        for x in inputs
    ]
    descriptors = [TensorDescriptor.of(a) for a in arrays]
    candidate = backend.create(op_type, attributes, descriptors)
    expected = NUMPY.create(op_type, attributes, descriptors)
    report = validate_operator(candidate, expected, arrays, **kwargs)
    problem = f"{op_type} {dict(attributes)} on {[a.shape for a in arrays]} ({dtype})"
    assert report.passed, f"{backend.name} {problem}: " + "; ".join(report.failures())
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


def gemm_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
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
    assert_matches_reference(backend, "Gemm", attributes, inputs, dtype)


def matmul_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    k = data.draw(small(4))
    batch = data.draw(st.lists(small(3), max_size=2))
    a_vector, b_vector = data.draw(st.booleans()), data.draw(st.booleans())
    a = (k,) if a_vector else (*broadcastable(data, batch), data.draw(small(3)), k)
    b = (k,) if b_vector else (*broadcastable(data, batch), k, data.draw(small(3)))
    rng = rng_of(data)
    assert_matches_reference(backend, "MatMul", {}, [normal(rng, a), normal(rng, b)], dtype)


# -- convolutions -------------------------------------------------------------------


def conv_geometry(data: st.DataObject, rank: int) -> tuple[list[int], list[int], list[int]]:
    """Kernel, strides and dilations for ``rank`` spatial axes (smaller in 3-D)."""
    top = 2 if rank == 3 else 3
    kernel = [data.draw(small(top)) for _ in range(rank)]
    strides = [data.draw(small(2)) for _ in range(rank)]
    dilations = [data.draw(small(2)) for _ in range(rank)]
    return kernel, strides, dilations


def conv_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
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
    assert_matches_reference(backend, "Conv", attributes, inputs, dtype)


def conv_transpose_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
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
    assert_matches_reference(backend, "ConvTranspose", attributes, inputs, dtype)


# -- pooling ------------------------------------------------------------------------


def pool_problem(data: st.DataObject) -> tuple[dict[str, Any], list[int]]:
    """Attributes and an input shape. Pads stay within the dilated kernel's reach
    (``(k - 1) * d``) so that no window lies wholly in padding."""
    rank = data.draw(st.integers(1, 3))
    top = 2 if rank == 3 else 3
    kernel = [data.draw(small(top)) for _ in range(rank)]
    strides = [data.draw(small(3)) for _ in range(rank)]
    dilations = [data.draw(small(2)) for _ in range(rank)]
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


def max_pool_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    attributes, shape = pool_problem(data)
    attributes["storage_order"] = int(data.draw(st.booleans()))
    inputs = [distinct(rng_of(data), shape)]
    assert_matches_reference(backend, "MaxPool", attributes, inputs, dtype)


def average_pool_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    attributes, shape = pool_problem(data)
    attributes["count_include_pad"] = int(data.draw(st.booleans()))
    inputs = [normal(rng_of(data), shape)]
    assert_matches_reference(backend, "AveragePool", attributes, inputs, dtype)


def global_average_pool_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), min_size=3, max_size=5))
    inputs = [normal(rng_of(data), shape)]
    assert_matches_reference(backend, "GlobalAveragePool", {}, inputs, dtype)


# -- normalization and dropout ------------------------------------------------------


def batch_normalization_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
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
    assert_matches_reference(backend, "BatchNormalization", attributes, inputs, dtype)


def dropout_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    """Inference, training with ratio 0, or training with a real ratio (the reference's
    mask; see test_tf_operators_dropout.py for more)."""
    shape = data.draw(st.lists(small(4), max_size=3))
    rng = rng_of(data)
    inputs = [normal(rng, shape)]
    ratio = data.draw(st.sampled_from([0.0, 0.3, 0.5]))
    training = data.draw(st.booleans())
    attributes: dict[str, Any] = {"seed": data.draw(st.integers(0, 99))}
    if data.draw(st.booleans()):
        inputs += [np.array(ratio, dtype=dtype), np.array(training)]
    else:
        attributes.update(ratio=ratio, training_mode=int(training))
    assert_matches_reference(backend, "Dropout", attributes, inputs, dtype)


# -- element-wise -------------------------------------------------------------------


def binary_case(op_type: str) -> Case:
    def case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
        full = data.draw(st.lists(small(3), max_size=3))
        a, b = broadcastable(data, full), broadcastable(data, full)
        if data.draw(st.booleans()):
            a, b = tuple(full), b
        rng = rng_of(data)
        divisor = away_from_zero(rng, b) * 2 if op_type == "Div" else normal(rng, b)
        assert_matches_reference(backend, op_type, {}, [normal(rng, a), divisor], dtype)

    return case


def sum_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    full = data.draw(st.lists(small(3), max_size=3))
    count = data.draw(st.integers(1, 4))
    shapes = [tuple(full)] + [
        tuple(full) if data.draw(st.booleans()) else broadcastable(data, full)
        for _ in range(count - 1)
    ]
    rng = rng_of(data)
    assert_matches_reference(backend, "Sum", {}, [normal(rng, s) for s in shapes], dtype)


def activation_case(op_type: str) -> Case:
    def case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
        shape = data.draw(st.lists(small(4), max_size=3))
        attributes = {}
        if op_type == "LeakyRelu" and data.draw(st.booleans()):
            attributes["alpha"] = data.draw(st.sampled_from([0.2, -0.5, 1.5]))
        inputs = [away_from_zero(rng_of(data), shape) * 2]
        assert_matches_reference(backend, op_type, attributes, inputs, dtype)

    return case


def softmax_case(op_type: str) -> Case:
    def case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
        shape = data.draw(st.lists(small(4), min_size=1, max_size=3))
        attributes = {}
        if data.draw(st.booleans()):
            attributes["axis"] = data.draw(st.integers(-len(shape), len(shape) - 1))
        inputs = [normal(rng_of(data), shape) * 3]
        assert_matches_reference(backend, op_type, attributes, inputs, dtype)

    return case


# -- shapes -------------------------------------------------------------------------


def reshape_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
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
    assert_matches_reference(backend, "Reshape", {"allowzero": allowzero}, inputs, dtype)


def flatten_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), min_size=1, max_size=4))
    axis = data.draw(st.integers(-len(shape), len(shape)))
    inputs = [normal(rng_of(data), shape)]
    assert_matches_reference(backend, "Flatten", {"axis": axis}, inputs, dtype)


def transpose_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), min_size=1, max_size=4))
    perm = data.draw(st.none() | st.permutations(list(range(len(shape)))))
    attributes = {} if perm is None else {"perm": perm}
    inputs = [normal(rng_of(data), shape)]
    assert_matches_reference(backend, "Transpose", attributes, inputs, dtype)


def concat_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), min_size=1, max_size=3))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = rng_of(data)
    inputs = []
    for _ in range(data.draw(st.integers(1, 3))):
        part = list(shape)
        part[axis] = data.draw(small(3))
        inputs.append(normal(rng, part))
    assert_matches_reference(backend, "Concat", {"axis": axis}, inputs, dtype)


def squeeze_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    ones = [i for i, d in enumerate(shape) if d == 1]
    inputs = [normal(rng_of(data), shape)]
    given_axes: bool = data.draw(st.booleans())
    if ones and given_axes:
        chosen = data.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
        negative = [data.draw(st.booleans()) for _ in chosen]
        axes = [a - len(shape) if n else a for a, n in zip(chosen, negative, strict=True)]
        inputs.append(np.array(axes, dtype=np.int64))
    assert_matches_reference(backend, "Squeeze", {}, inputs, dtype)


def unsqueeze_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(small(3), max_size=3))
    count = data.draw(st.integers(1, 2))
    rank = len(shape) + count
    axes = data.draw(
        st.lists(st.integers(0, rank - 1), min_size=count, max_size=count, unique=True)
    )
    axes = [a - rank if data.draw(st.booleans()) else a for a in axes]
    inputs = [normal(rng_of(data), shape), np.array(axes, dtype=np.int64)]
    assert_matches_reference(backend, "Unsqueeze", {}, inputs, dtype)


def identity_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), max_size=3))
    assert_matches_reference(backend, "Identity", {}, [normal(rng_of(data), shape)], dtype)


# -- losses -------------------------------------------------------------------------


def softmax_cross_entropy_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
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
    assert_matches_reference(backend, "SoftmaxCrossEntropyLoss", attributes, inputs, dtype)


def mean_squared_error_case(data: st.DataObject, backend: MXNetBackend, dtype: str) -> None:
    shape = data.draw(st.lists(small(4), max_size=3))
    reduction = data.draw(st.sampled_from(["mean", "sum", "none"]))
    rng = rng_of(data)
    inputs = [normal(rng, shape), normal(rng, shape)]
    attributes = {"reduction": reduction}
    assert_matches_reference(backend, "MeanSquaredError", attributes, inputs, dtype)


#: The property of every operator.
CASES: dict[str, Case] = {
    "Gemm": gemm_case,
    "MatMul": matmul_case,
    "Conv": conv_case,
    "ConvTranspose": conv_transpose_case,
    "MaxPool": max_pool_case,
    "AveragePool": average_pool_case,
    "GlobalAveragePool": global_average_pool_case,
    **{op: activation_case(op) for op in ("Relu", "LeakyRelu", "Sigmoid", "Tanh")},
    **{op: softmax_case(op) for op in ("Softmax", "LogSoftmax")},
    "BatchNormalization": batch_normalization_case,
    "Dropout": dropout_case,
    **{op: binary_case(op) for op in ("Add", "Sub", "Mul", "Div")},
    "Sum": sum_case,
    "Reshape": reshape_case,
    "Flatten": flatten_case,
    "Transpose": transpose_case,
    "Concat": concat_case,
    "Squeeze": squeeze_case,
    "Unsqueeze": unsqueeze_case,
    "Identity": identity_case,
    "SoftmaxCrossEntropyLoss": softmax_cross_entropy_case,
    "MeanSquaredError": mean_squared_error_case,
}


@BACKENDS
@DTYPES
@pytest.mark.parametrize("op_type", list(CASES))
def test_operator_matches_the_reference(op_type: str, dtype: str, backend: MXNetBackend) -> None:
    check_property(CASES[op_type], backend, dtype)


# -- fixed cases ----------------------------------------------------------------------


def test_every_reference_operator_is_implemented_and_tested() -> None:
    assert set(MX.supported()) == set(NUMPY.supported()) == set(CASES)


@BACKENDS
@DTYPES
def test_max_pool_indices_when_a_begin_pad_and_an_end_crop_cancel(
    backend: MXNetBackend, dtype: str
) -> None:
    attributes = {"kernel_shape": [1, 2], "strides": [1, 2], "pads": [0, 1, 0, 0]}
    for x in ([[[[0.5, -0.5]]]], [[[[-0.5, 0.5]]]]):
        assert_matches_reference(backend, "MaxPool", attributes, [np.array(x)], dtype)


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
    inputs = [distinct(rng, s) if op_type == "MaxPool" else normal(rng, s) for s in shapes]
    assert_matches_reference(backend, op_type, attributes, inputs, "float64")


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
    assert_matches_reference(backend, op_type, {}, inputs, dtype)
    op = backend.create(op_type, {}, [TensorDescriptor.of(np.asarray(x, dtype)) for x in inputs])
    assert op.forward([np.asarray(x, dtype) for x in inputs])[0].shape == ()


def test_d5_validates_every_default_problem() -> None:
    """The path of ``d5 validate op --backend mxnet``: the backend loaded by name
    from the ``d5.operators`` group, each operator's default problem, the numpy
    reference (float32, with the float64 operator for the gradient check)."""
    failed = {}
    for op_type, problem in problems.DEFAULT_PROBLEMS.items():
        result = runner.validate_op(problem, "mxnet", dtype="float32")
        assert result.against == "numpy"
        if not result.passed:
            failed[op_type] = result.report.failures()
    assert not failed
    assert set(problems.DEFAULT_PROBLEMS) == set(MX.supported())


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
