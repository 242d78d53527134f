"""LayerNormalization (and the batched, broadcasting MatMul transformers need): forward
against onnx.reference, backward against central differences, one-line errors."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from numpy_onnx_support import onnx_forward
from numpy_ref_support import assert_gradients, make, run

from d5core.api import UsageError

RNG = np.random.default_rng(3)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


LAYER_NORM_CASES: list[tuple[dict[str, Any], list[Any]]] = [
    ({}, [r(2, 3, 4), r(4), r(4)]),
    ({"axis": 1}, [r(2, 3, 4), r(3, 4), r(3, 4)]),
    ({"axis": -2, "epsilon": 1e-2}, [r(2, 3, 4), r(3, 4)]),
    ({"axis": 0}, [r(3, 4), r(3, 4), r(1, 4)]),
    ({}, [r(5), r(5), r(1)]),
]


@pytest.mark.parametrize(("attributes", "inputs"), LAYER_NORM_CASES)
def test_layer_normalization_matches_onnx_reference(attributes, inputs) -> None:
    got = run("LayerNormalization", attributes, inputs)
    expected = onnx_forward("LayerNormalization", attributes, inputs, outputs=3, opset=17)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        # onnx.reference reads epsilon as a float32 attribute
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(("attributes", "inputs"), LAYER_NORM_CASES)
def test_layer_normalization_backward_through_every_output(attributes, inputs) -> None:
    """The gradcheck's cotangents are random for Y, Mean and InvStdDev alike."""
    assert_gradients("LayerNormalization", attributes, inputs)


def test_layer_normalization_float32_keeps_its_dtype_and_unused_statistics_add_nothing() -> None:
    x, scale, bias = r(2, 4), r(4), r(4)
    op = make("LayerNormalization", {}, [x, scale, bias])
    outs = op.forward([x, scale, bias])
    dy = r(2, 4)
    with_zeros = op.backward([dy, np.zeros((2, 1)), np.zeros((2, 1))], [x, scale, bias], outs)
    only_y = op.backward([dy], [x, scale, bias], outs)
    for a, b in zip(with_zeros, only_y, strict=True):
        np.testing.assert_allclose(a, b)
    x32 = [a.astype(np.float32) for a in (x, scale, bias)]
    outs32 = run("LayerNormalization", {}, x32)
    assert all(o.dtype == np.float32 for o in outs32)
    np.testing.assert_allclose(outs32[0], outs[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("attributes", "inputs", "pattern"),
    [
        ({"axis": 3}, [r(2, 3, 4), r(4)], r"axis 3 is out of range for X of rank 3"),
        ({}, [r(2, 3, 4), r(3)], r"input 1 \(Scale\) has shape \(3,\), which does not"),
        ({}, [r(2, 4), r(4), r(2, 4)], r"input 2 \(B\) has shape \(2, 4\)"),
        ({"stash_type": 11}, [r(2, 4), r(4)], r"stash_type=11 is not supported"),
        ({}, [r(2, 4)], r"takes 2 to 3 inputs"),
        ({}, [r(2, 4), r(4).astype(np.float32)], r"give all floating inputs one dtype"),
    ],
)
def test_layer_normalization_errors_are_one_line(attributes, inputs, pattern) -> None:
    with pytest.raises(UsageError) as info:
        run("LayerNormalization", attributes, inputs)
    message = str(info.value)
    assert "\n" not in message and re.search(pattern, message), message


MATMUL_CASES = [
    [r(2, 1, 3, 4), r(5, 4, 2)],
    [r(4), r(4)],
    [r(4), r(3, 4, 2)],
    [r(2, 3, 4), r(4)],
    [r(1, 3, 4), r(2, 4, 5)],
    [r(2, 2, 3, 4), r(4, 3)],
]


@pytest.mark.parametrize(
    "inputs",
    MATMUL_CASES,
    ids=["@".join("x".join(map(str, a.shape)) for a in c) for c in MATMUL_CASES],
)
def test_batched_matmul_broadcasts_forward_and_backward(inputs) -> None:
    (y,) = run("MatMul", {}, inputs)
    np.testing.assert_allclose(y, onnx_forward("MatMul", {}, inputs, opset=13)[0], rtol=1e-12)
    assert_gradients("MatMul", {}, inputs)


def test_matmul_refuses_batch_axes_that_do_not_broadcast() -> None:
    with pytest.raises(UsageError, match=r"does not broadcast") as info:
        run("MatMul", {}, [r(2, 3, 4), r(3, 4, 5)])
    assert "\n" not in str(info.value)
