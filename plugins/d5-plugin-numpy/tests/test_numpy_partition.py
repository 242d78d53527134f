"""Split and Trilu in the reference: forward against onnx's reference evaluator at the
opsets whose forms the executor translates, exact backward (``None`` cotangents are
zeros), one-line errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_numpy.backend import NumpyBackend
from d5_plugin_numpy.executor import NumpyExecutor
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from d5core.api import TensorDescriptor, UsageError


def _split_model(opset: int, attrs: dict[str, Any], split: list[int] | None, outputs: int) -> Any:
    names = [f"y{i}" for i in range(outputs)]
    inputs, init = ["x"], []
    if split is not None:
        inputs.append("split")
        init.append(numpy_helper.from_array(np.array(split, dtype=np.int64), "split"))
    graph = helper.make_graph(
        [helper.make_node("Split", inputs, names, name="cut", **attrs)],
        "split",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 7])],
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, [2, None]) for n in names],
        initializer=init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    ("opset", "attrs", "split", "outputs"),
    [
        (11, {"axis": 1, "split": [1, 4, 2]}, None, 3),  # split an attribute
        (11, {"axis": -1}, None, 1),  # equal parts from the outputs
        (13, {"axis": 1}, [3, 0, 4], 3),  # split an input, a piece of size 0
        (18, {"axis": 1, "num_outputs": 4}, None, 4),  # 2, 2, 2 and a smaller last 1
        (18, {"axis": 0}, [1, 1], 2),
    ],
)
def test_executor_split_matches_onnx_reference(
    opset: int, attrs: dict[str, Any], split: list[int] | None, outputs: int
) -> None:
    model = _split_model(opset, attrs, split, outputs)
    x = np.random.default_rng(0).standard_normal((2, 7))
    ex = NumpyExecutor(model)
    got = ex.inference({"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    assert ex.details() == {}
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[f"y{i}"], w)


def test_split_backward_concatenates_and_fills_missing_cotangents_with_zeros() -> None:
    op = NumpyBackend().create(
        "Split", {"axis": 1}, [TensorDescriptor((2, 5), "float64"), TensorDescriptor((3,), "int64")]
    )
    x, split = np.arange(10.0).reshape(2, 5), np.array([2, 1, 2])
    outs = op.forward([x, split])
    assert [o.shape for o in outs] == [(2, 2), (2, 1), (2, 2)]
    g0, g2 = np.full((2, 2), 3.0), np.full((2, 2), -1.0)
    dx, dsplit = op.backward([g0, None, g2], [x, split], outs)  # type: ignore[list-item]
    np.testing.assert_array_equal(dx, np.concatenate([g0, np.zeros((2, 1)), g2], axis=1))
    assert dsplit is None


def test_trilu_masks_forward_and_backward() -> None:
    x = np.arange(1.0, 13.0).reshape(3, 4)
    for upper, k in [(1, 0), (1, 2), (0, -1), (0, 5)]:
        op = NumpyBackend().create("Trilu", {"upper": upper}, [TensorDescriptor.of(x)])
        kk = np.array(k, dtype=np.int64)
        want = np.triu(x, k) if upper else np.tril(x, k)
        np.testing.assert_array_equal(op.forward([x, kk])[0], want)
        g = op.backward([np.ones_like(x)], [x, kk], [want])[0]
        np.testing.assert_array_equal(g, (want != 0).astype(float))


@pytest.mark.parametrize(
    ("op_type", "attrs", "descs", "message"),
    [
        ("Split", {"axis": 2}, [((2, 3), "float32")], "Split axis 2 is out of range for rank 2"),
        ("Split", {}, [((4,), "float32")], "either the input split or the attribute num_outputs"),
        ("Split", {"num_outputs": 0}, [((4,), "float32")], "num_outputs must be 1 or more"),
        ("Trilu", {"upper": 2}, [((2, 2), "float32")], "upper must be 0 or 1"),
        ("Trilu", {}, [((3,), "float32")], "must have rank 2 or more"),
    ],
)
def test_bad_problems_are_refused_in_one_line(
    op_type: str, attrs: dict[str, Any], descs: list[tuple[Any, str]], message: str
) -> None:
    with pytest.raises(UsageError, match=message) as info:
        NumpyBackend().create(op_type, attrs, [TensorDescriptor(s, d) for s, d in descs])
    assert "\n" not in str(info.value)


def test_split_sizes_must_add_up() -> None:
    op = NumpyBackend().create(
        "Split", {}, [TensorDescriptor((4,), "float32"), TensorDescriptor((2,), "int64")]
    )
    with pytest.raises(UsageError, match=r"split \[1, 2\] must be non-negative sizes adding up"):
        op.forward([np.zeros(4, np.float32), np.array([1, 2])])
