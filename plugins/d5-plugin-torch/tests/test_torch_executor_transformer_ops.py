"""The torch executor on the operators of transformers and RNNs, and on common inference
operators: outputs and gradients against the numpy reference executor, outputs and
dtypes against onnx's own reference evaluator, and values read at run time."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
import torch
from d5_plugin_torch.executor import TorchExecutor
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from d5core.api import UsageError
from d5core.testing.reference_agreement import compare_with_reference

RNG = np.random.default_rng(0)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, elem, list(value.shape))


def _model(
    nodes: list[onnx.NodeProto],
    feeds: dict[str, np.ndarray],
    params: dict[str, np.ndarray],
    outputs: list[str],
    opset: int = 18,
    examples: list[np.ndarray] | None = None,
) -> onnx.ModelProto:
    """A one-graph model; its outputs typed and shaped like ``examples``, else like the
    values onnx's reference evaluator computes."""
    graph = helper.make_graph(
        nodes,
        "g",
        [_info(k, v) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in params.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    values = examples if examples is not None else ReferenceEvaluator(model).run(None, feeds)
    del model.graph.output[:]
    model.graph.output.extend(_info(o, np.asarray(v)) for o, v in zip(outputs, values, strict=True))
    return model


def _with_square_loss(
    op: str,
    attrs: dict[str, Any],
    inputs: list[str],
    feeds: dict[str, np.ndarray],
    params: dict[str, np.ndarray],
    opset: int,
) -> onnx.ModelProto:
    """``y = op(inputs)`` and ``loss = sum(y * y)``: the gradient reaches every input."""
    nodes = [
        helper.make_node(op, inputs, ["y"], **attrs),
        helper.make_node("Mul", ["y", "y"], ["sq"]),
        helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    return _model(nodes, feeds, params, ["y", "loss"], opset)


#: (id, op, attributes, fed inputs, initializers (trainable when floating), opset);
#: the node's inputs are the fed inputs, then the initializers, in order.
TRAINING_CASES: list[
    tuple[str, str, dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray], int]
] = [
    (
        "gather",
        "Gather",
        {"axis": 0},
        {"ids": _i(3, 0, -1, 3).reshape(2, 2)},
        {"table": _f(5, 3)},
        18,
    ),
    ("gather-axis1", "Gather", {"axis": 1}, {"ids": _i(1, 3)}, {"table": _f(2, 4)}, 18),
    (
        "gather-elements",
        "GatherElements",
        {"axis": 1},
        {"x": _f(3, 4)},
        {"i": _i(0, 3, 1, 1, 2, 0).reshape(3, 2)},
        18,
    ),
    (
        "slice",
        "Slice",
        {},
        {"x": _f(4, 6)},
        {"s": _i(1, -1), "e": _i(4, -6), "a": _i(0, 1), "st": _i(2, -2)},
        18,
    ),
    ("slice-attrs", "Slice", {"starts": [0], "ends": [2], "axes": [1]}, {"x": _f(3, 4)}, {}, 9),
    ("expand", "Expand", {}, {"x": _f(3, 1)}, {"shape": _i(2, 3, 4)}, 18),
    ("pow", "Pow", {}, {"x": np.abs(_f(2, 3)) + 0.5}, {"p": np.asarray(1.7, np.float32)}, 18),
    ("sqrt", "Sqrt", {}, {"x": np.abs(_f(2, 3)) + 0.5}, {}, 18),
    ("erf", "Erf", {}, {"x": _f(2, 3)}, {}, 18),
    ("exp", "Exp", {}, {"x": _f(2, 3)}, {}, 18),
    ("log", "Log", {}, {"x": np.abs(_f(2, 3)) + 0.5}, {}, 18),
    ("gelu", "Gelu", {}, {"x": _f(2, 3)}, {}, 20),
    ("gelu-tanh", "Gelu", {"approximate": "tanh"}, {"x": _f(2, 3)}, {}, 20),
    ("reduce-mean", "ReduceMean", {"keepdims": 1}, {"x": _f(2, 3, 4)}, {"axes": _i(-1)}, 18),
    ("reduce-mean-13", "ReduceMean", {"axes": [0, 2], "keepdims": 0}, {"x": _f(2, 3, 4)}, {}, 13),
    ("reduce-sum", "ReduceSum", {"keepdims": 0}, {"x": _f(2, 3, 4)}, {"axes": _i(1)}, 13),
    ("reduce-sum-11", "ReduceSum", {"axes": [1]}, {"x": _f(2, 3, 4)}, {}, 11),
    ("reduce-max", "ReduceMax", {"keepdims": 1}, {"x": _f(2, 3, 4)}, {"axes": _i(2)}, 18),
    (
        "layer-norm",
        "LayerNormalization",
        {"axis": -1},
        {"x": _f(2, 3, 4)},
        {"s": _f(4), "b": _f(4)},
        17,
    ),
    (
        "layer-norm-axis1",
        "LayerNormalization",
        {"axis": 1, "epsilon": 1e-3},
        {"x": _f(2, 3, 4)},
        {"s": _f(3, 4)},
        17,
    ),
    ("matmul-batched", "MatMul", {}, {"x": _f(2, 3, 4)}, {"w": _f(4, 5)}, 18),
    ("matmul-broadcast", "MatMul", {}, {"x": _f(2, 1, 3, 4)}, {"w": _f(3, 4, 2)}, 18),
    ("where", "Where", {}, {"c": _f(2, 3) > 0}, {"a": _f(2, 3), "b": _f(1, 3)}, 18),
    ("cast", "Cast", {"to": TensorProto.DOUBLE}, {"x": _f(2, 3)}, {}, 18),
]


#: Node inputs not in the order fed inputs, then initializers.
_ORDER = {"Gather": ["table", "ids"], "Where": ["c", "a", "b"]}


@pytest.mark.parametrize(
    ("op", "attrs", "feeds", "params", "opset"),
    [c[1:] for c in TRAINING_CASES],
    ids=[c[0] for c in TRAINING_CASES],
)
def test_training_ops_match_the_reference_forward_and_backward(
    op: str,
    attrs: dict[str, Any],
    feeds: dict[str, np.ndarray],
    params: dict[str, np.ndarray],
    opset: int,
) -> None:
    inputs = _ORDER.get(op, [*feeds, *params])
    model = _with_square_loss(op, attrs, inputs, feeds, params, opset)
    float_params = {k: v for k, v in params.items() if v.dtype.kind == "f"}
    if float_params:
        compare_with_reference(TorchExecutor, model, feeds, "loss")
    else:  # nothing trainable: the gradient of the loss for its input, from autograd
        compare_with_reference(TorchExecutor, model, feeds, None)


def test_comparisons_feed_a_masked_softmax_with_gradients() -> None:
    """Equal, Less, Greater, Where and ReduceMax in an attention-style masked softmax."""
    x, ids = _f(2, 4, 4), np.array([[1, 2, 0, 0], [3, 0, 1, 0]], np.int64)
    nodes = [
        helper.make_node("Equal", ["ids", "zero"], ["pad"]),
        helper.make_node("Less", ["ids", "two"], ["low"]),
        helper.make_node("Greater", ["ids", "two"], ["high"]),
        helper.make_node("Or", ["low", "high"], ["any"]),
        helper.make_node("Unsqueeze", ["pad", "ax"], ["pad3"]),
        helper.make_node("MatMul", ["x", "w"], ["scores"]),
        helper.make_node("Where", ["pad3", "neg", "scores"], ["masked"]),
        helper.make_node("ReduceMax", ["masked", "last"], ["top"]),
        helper.make_node("Sub", ["masked", "top"], ["shifted"]),
        helper.make_node("Exp", ["shifted"], ["e"]),
        helper.make_node("ReduceSum", ["e", "last"], ["total"]),
        helper.make_node("Div", ["e", "total"], ["p"]),
        helper.make_node("Cast", ["any"], ["anyf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["anyf", "ax"], ["anyf3"]),
        helper.make_node("Mul", ["p", "anyf3"], ["y"]),
        helper.make_node("Mul", ["y", "y"], ["sq"]),
        helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    params = {
        "w": _f(4, 4),
        "zero": _i(0),
        "two": _i(2),
        "ax": _i(1),
        "last": _i(-1),
        "neg": np.asarray(-1e9, np.float32),
    }
    model = _model(nodes, {"x": x, "ids": ids}, params, ["y", "loss"])
    # "neg" is a float initializer, so trainable like "w"
    compare_with_reference(TorchExecutor, model, {"x": x, "ids": ids}, "loss")


def test_negative_pads_crop() -> None:
    x = _f(3, 4)
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")],
        "pad",
        [_info("x", x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [numpy_helper.from_array(_i(1, -1, -1, 2), "pads")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    got = TorchExecutor(model).inference({"x": x})["y"]
    want = np.pad(x[:, 1:], ((1, 0), (0, 2)))[:-1]
    np.testing.assert_array_equal(got, want)


def test_shapes_computed_at_run_time_build_tensors() -> None:
    """Shape, Slice, Concat and ConstantOfShape on shapes known only when it runs."""
    x = _f(3, 5)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["rows"]),
        helper.make_node("Concat", ["rows", "two"], ["target"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            ["target"],
            ["ones"],
            value=numpy_helper.from_array(np.ones(1, np.float32)),
        ),
        helper.make_node("Slice", ["x", "zero2", "two2", "one2"], ["head"]),
        helper.make_node("Mul", ["head", "ones"], ["y"]),
        helper.make_node("Shape", ["x"], ["tail"], start=-1),
        helper.make_node("Size", ["x"], ["n"]),
    ]
    params = {
        "zero": _i(0),
        "one": _i(1),
        "two": _i(2),
        "zero2": _i(0),
        "two2": _i(2),
        "one2": _i(1),
    }
    model = _model(nodes, {"x": x}, params, ["y", "tail", "n"])
    ex = TorchExecutor(model)
    assert not any(k == "ones" for k in ex._constants)  # not folded: computed at run time
    out = ex.inference({"x": x})
    np.testing.assert_array_equal(out["y"], x[:, :2])
    assert out["tail"].dtype == np.int64 and out["tail"].tolist() == [5]
    assert out["n"].shape == () and int(out["n"]) == 15
    again = ex.inference({"x": _f(2, 7)})  # another shape, the same executor
    assert again["y"].shape == (2, 2)


def test_fed_values_are_read_when_the_node_runs() -> None:
    """Reshape, Slice, Expand, Tile and reductions whose shape-like inputs are fed."""
    x = _f(2, 3, 4)
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Slice", ["r", "starts", "ends"], ["s"]),
        helper.make_node("ReduceSum", ["s", "axes"], ["y"], keepdims=0),
    ]
    feeds = {"x": x, "shape": _i(6, -1), "starts": _i(1), "ends": _i(5), "axes": _i(1)}
    model = _model(nodes, feeds, {}, ["y"], opset=13)
    got = TorchExecutor(model).inference(feeds)["y"]
    np.testing.assert_allclose(got, x.reshape(6, -1)[1:5].sum(1), rtol=1e-6)


#: Inference cases checked against onnx's reference evaluator, dtypes included:
#: (id, op, attributes, inputs, opset).
INFERENCE_CASES: list[tuple[str, str, dict[str, Any], list[np.ndarray], int]] = [
    ("div-int-truncates", "Div", {}, [_i(7, -7, 9), _i(2, 2, -4)], 18),
    ("mod-int", "Mod", {}, [_i(7, -7, 9), _i(3, 3, -4)], 18),
    (
        "mod-fmod",
        "Mod",
        {"fmod": 1},
        [np.array([5.5, -5.5], np.float32), np.array([2, 2], np.float32)],
        18,
    ),
    ("max-int32", "Max", {}, [np.array([1, 5, -3], np.int32), np.array([4, 2, -9], np.int32)], 18),
    ("min-uint32", "Min", {}, [np.array([1, 5, 3], np.uint32), np.array([4, 2, 9], np.uint32)], 18),
    (
        "less-or-equal-uint64",
        "LessOrEqual",
        {},
        [np.array([1, 2**63 + 5], np.uint64), np.array([2**63, 3], np.uint64)],
        18,
    ),
    (
        "bitshift-right-uint64",
        "BitShift",
        {"direction": "RIGHT"},
        [np.array([2**64 - 1, 16], np.uint64), np.array([60, 2], np.uint64)],
        18,
    ),
    (
        "bitwise-xor-uint16",
        "BitwiseXor",
        {},
        [np.array([3, 65535], np.uint16), np.array([5, 1], np.uint16)],
        18,
    ),
    ("clip-int", "Clip", {}, [_i(-5, 0, 5), _i(-2), _i(3)], 13),
    ("reduce-prod-int", "ReduceProd", {"keepdims": 0}, [_i(1, 2, 3, 4).reshape(2, 2), _i(1)], 18),
    (
        "reduce-sum-int32",
        "ReduceSum",
        {"keepdims": 1},
        [np.arange(6, dtype=np.int32).reshape(2, 3), _i(1)],
        13,
    ),
    ("reduce-l2-empty-axes-noop", "ReduceL2", {"noop_with_empty_axes": 1}, [_f(2, 3), _i()], 18),
    ("reduce-log-sum-exp", "ReduceLogSumExp", {"keepdims": 0}, [_f(2, 3), _i(0)], 18),
    (
        "argmax-last",
        "ArgMax",
        {"axis": 1, "select_last_index": 1},
        [np.array([[1, 3, 3], [2, 2, 0]], np.float32)],
        18,
    ),
    (
        "topk",
        "TopK",
        {"axis": -1, "largest": 1},
        [np.array([[1, 3, 3, 0], [2, 2, 5, 1]], np.float32), _i(3)],
        18,
    ),
    (
        "cumsum-exclusive-reverse",
        "CumSum",
        {"exclusive": 1, "reverse": 1},
        [np.arange(6, dtype=np.int32).reshape(2, 3), np.asarray(1)],
        18,
    ),
    ("hardmax", "Hardmax", {"axis": 1}, [np.array([[1, 3, 3], [2, 2, 0]], np.float32)], 13),
    ("einsum", "Einsum", {"equation": "bij,bjk->bik"}, [_f(2, 3, 4), _f(2, 4, 2)], 18),
    (
        "gather-nd-batch",
        "GatherND",
        {"batch_dims": 1},
        [_f(2, 3, 4), _i(1, 0, 2, 3).reshape(2, 1, 2)],
        18,
    ),
    (
        "scatter-elements-add",
        "ScatterElements",
        {"axis": 1, "reduction": "add"},
        [_f(2, 4), _i(0, 0, 3, 1).reshape(2, 2), _f(2, 2)],
        18,
    ),
    (
        "scatter-nd-mul",
        "ScatterND",
        {"reduction": "mul"},
        [_f(4, 3), _i(1, 3).reshape(2, 1), _f(2, 3)],
        18,
    ),
    ("pad-reflect", "Pad", {"mode": "reflect"}, [_f(1, 3, 4), _i(0, 1, 2, 0, 2, 1)], 18),
    (
        "pad-edge-axes",
        "Pad",
        {"mode": "edge"},
        [_f(2, 3), _i(2, 1), np.asarray(0.0, np.float32), _i(-1)],
        18,
    ),
    ("pad-wrap", "Pad", {"mode": "wrap"}, [_f(2, 3), _i(1, 2, 1, 2)], 19),
    ("pad-constant", "Pad", {}, [_f(3, 4), _i(1, 0, 0, 2), np.asarray(2.5, np.float32)], 18),
    ("split-num-outputs", "Split", {"axis": 1, "num_outputs": 3}, [_f(2, 7)], 18),
    ("tile", "Tile", {}, [_i(1, 2, 3, 4).reshape(2, 2), _i(2, 3)], 18),
    (
        "range-float",
        "Range",
        {},
        [np.asarray(1.0, np.float32), np.asarray(2.2, np.float32), np.asarray(0.3, np.float32)],
        18,
    ),
    (
        "one-hot",
        "OneHot",
        {"axis": 0},
        [_i(0, 2, -1), np.asarray(3), np.array([0.5, 2.0], np.float32)],
        18,
    ),
    ("nonzero", "NonZero", {}, [np.array([[1, 0], [3, 4]], np.int32)], 18),
    ("trilu-lower", "Trilu", {"upper": 0}, [_f(2, 3, 4), _i(1)], 18),
    ("depth-to-space-crd", "DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [_f(1, 8, 2, 3)], 18),
    ("space-to-depth", "SpaceToDepth", {"blocksize": 2}, [_f(1, 2, 4, 6)], 18),
    ("compress", "Compress", {"axis": 1}, [_f(2, 4), np.array([True, False, True], bool)], 18),
    (
        "reverse-sequence",
        "ReverseSequence",
        {"batch_axis": 0, "time_axis": 1},
        [_f(3, 4), _i(4, 2, 1)],
        18,
    ),
    ("eye-like", "EyeLike", {"k": 1, "dtype": TensorProto.INT32}, [_f(3, 4)], 18),
    ("instance-norm", "InstanceNormalization", {}, [_f(2, 3, 4), _f(3), _f(3)], 18),
    ("group-norm", "GroupNormalization", {"num_groups": 2}, [_f(2, 4, 3), _f(4), _f(4)], 21),
    ("mvn", "MeanVarianceNormalization", {}, [_f(2, 3, 2, 2)], 18),
    ("lp-norm", "LpNormalization", {"axis": 0, "p": 2}, [_f(3, 2)], 18),
    ("rms-norm", "RMSNormalization", {}, [_f(2, 3, 4), _f(4)], 23),
    (
        "nll-loss-ignore",
        "NegativeLogLikelihoodLoss",
        {"ignore_index": 1},
        [_f(3, 4), _i(1, 0, 3)],
        18,
    ),
    ("selu", "Selu", {}, [_f(2, 3)], 18),
    ("hard-swish", "HardSwish", {}, [_f(2, 3)], 18),
    ("shrink", "Shrink", {"lambd": 0.3, "bias": 0.1}, [_f(2, 3)], 18),
    (
        "is-inf-negative",
        "IsInf",
        {"detect_positive": 0},
        [np.array([1, -np.inf, np.inf], np.float32)],
        18,
    ),
    (
        "cast-bfloat16",
        "Cast",
        {"to": TensorProto.BFLOAT16},
        [np.array([1.5, -2.25], np.float32)],
        18,
    ),
    (
        "attention-causal-gqa",
        "Attention",
        {"is_causal": 1, "q_num_heads": 4, "kv_num_heads": 2},
        [_f(2, 3, 8), _f(2, 5, 4), _f(2, 5, 6)],
        23,
    ),
]


INFERENCE_CASES += [
    (
        "resize-linear-half-pixel",
        "Resize",
        {"mode": "linear"},
        [_f(1, 2, 3, 4), np.zeros(0, np.float32), np.array([1, 1, 1.5, 0.75], np.float32)],
        19,
    ),
    (
        "resize-cubic-antialias",
        "Resize",
        {"mode": "cubic", "antialias": 1},
        [_f(1, 1, 6, 6), np.zeros(0, np.float32), np.zeros(0, np.float32), _i(1, 1, 3, 4)],
        19,
    ),
    (
        "resize-nearest-axes-sizes",
        "Resize",
        {"mode": "nearest", "axes": [2], "nearest_mode": "ceil"},
        [_f(1, 2, 5), np.zeros(0, np.float32), np.zeros(0, np.float32), _i(8)],
        19,
    ),
    (
        "resize-tf-crop",
        "Resize",
        {
            "mode": "linear",
            "coordinate_transformation_mode": "tf_crop_and_resize",
            "extrapolation_value": 7.0,
        },
        [
            _f(1, 1, 4, 4),
            np.array([0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7], np.float32),
            np.zeros(0, np.float32),
            _i(1, 1, 3, 3),
        ],
        19,
    ),
    (
        "quantize-per-axis",
        "QuantizeLinear",
        {"axis": 1},
        [_f(2, 3), np.array([0.1, 0.2, 0.05], np.float32), np.array([0, 10, 250], np.uint8)],
        19,
    ),
    (
        "dequantize-int8",
        "DequantizeLinear",
        {},
        [np.array([-128, 0, 5, 127], np.int8), np.asarray(0.5, np.float32), np.asarray(3, np.int8)],
        19,
    ),
    (
        "qlinear-matmul",
        "QLinearMatMul",
        {},
        [
            np.array([[2, 7], [9, 1]], np.uint8),
            np.asarray(0.1, np.float32),
            np.asarray(3, np.uint8),
            np.array([[5, 1], [2, 8]], np.uint8),
            np.asarray(0.2, np.float32),
            np.asarray(1, np.uint8),
            np.asarray(0.05, np.float32),
            np.asarray(10, np.uint8),
        ],
        13,
    ),
    (
        "grid-sample-border",
        "GridSample",
        {"padding_mode": "border", "align_corners": 1},
        [_f(1, 2, 3, 4), np.clip(_f(1, 2, 3, 2), -1.2, 1.2)],
        20,
    ),
    ("affine-grid", "AffineGrid", {"align_corners": 0}, [_f(2, 2, 3), _i(2, 1, 3, 4)], 20),
    ("center-crop-pad", "CenterCropPad", {}, [_f(5, 2, 3), _i(2, 4, 3)], 18),
    (
        "col2im",
        "Col2Im",
        {"strides": [1, 1], "pads": [1, 0, 0, 1]},
        [_f(1, 4, 12), _i(3, 4), _i(2, 2)],
        18,
    ),
    (
        "unique-sorted-axis",
        "Unique",
        {"axis": 0},
        [np.array([[1, 2], [3, 4], [1, 2], [0, 5]], np.int64)],
        11,
    ),
    (
        "rotary-interleaved",
        "RotaryEmbedding",
        {"interleaved": 1, "num_heads": 2},
        [_f(2, 3, 8), _f(4, 2), _f(4, 2), _i(0, 1, 3, 2, 2, 0).reshape(2, 3)],
        23,
    ),
    (
        "lp-pool-dilated",
        "LpPool",
        {"kernel_shape": [2, 2], "dilations": [2, 1], "p": 3},
        [_f(1, 2, 5, 4)],
        18,
    ),
    (
        "average-pool-dilated-ceil",
        "AveragePool",
        {
            "kernel_shape": [2, 2],
            "dilations": [2, 2],
            "strides": [2, 1],
            "ceil_mode": 1,
            "pads": [1, 0, 0, 1],
            "count_include_pad": 1,
        },
        [_f(1, 1, 6, 5)],
        19,
    ),
    ("cumprod-reverse", "CumProd", {"reverse": 1}, [_f(2, 3), np.asarray(1)], 26),
    (
        "nms-center",
        "NonMaxSuppression",
        {"center_point_box": 1},
        [
            np.array(
                [[[0.5, 0.5, 1, 1], [0.5, 0.6, 1, 1], [0.5, 5, 1, 1], [4, 4, 2, 2]]], np.float32
            ),
            np.array([[[0.9, 0.75, 0.6, 0.95]]], np.float32),
            _i(3),
            np.array([0.5], np.float32),
            np.array([0.0], np.float32),
        ],
        11,
    ),
    ("dft-onesided", "DFT", {"onesided": 1}, [_f(2, 8, 1), np.asarray(8), np.asarray(1)], 20),
    ("hamming-window", "HammingWindow", {"periodic": 0}, [np.asarray(6, np.int64)], 17),
    ("det", "Det", {}, [_f(2, 3, 3)], 18),
    ("bitcast", "BitCast", {"to": TensorProto.INT32}, [_f(2, 3)], 26),
]


INFERENCE_CASES += [
    ("swiglu", "SwiGLU", {"alpha": 1.5}, [_f(2, 3), _f(2, 3)], 28),
    (
        "causal-conv-with-state",
        "CausalConvWithState",
        {"activation": "silu"},
        [_f(2, 3, 5), _f(3, 1, 3), _f(3), _f(2, 3, 2)],
        27,
    ),
    (
        "linear-attention-gated-delta-gqa",
        "LinearAttention",
        {"q_num_heads": 4, "kv_num_heads": 2},
        [
            _f(2, 3, 8),
            _f(2, 3, 4),
            _f(2, 3, 6),
            _f(2, 2, 2, 3),
            -np.abs(_f(2, 3, 2)),
            1 / (1 + np.exp(-_f(2, 3, 2))),
        ],
        27,
    ),
    (
        "batchnorm-training-mode-statistics",
        "BatchNormalization",
        {"training_mode": 1, "momentum": 0.8},
        [_f(2, 3, 4), _f(3), _f(3), _f(3), np.abs(_f(3))],
        15,
    ),
]


INFERENCE_CASES += [
    (
        "convtranspose-same-lower",
        "ConvTranspose",
        {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
        [_f(1, 1, 3, 3), _f(1, 2, 3, 3)],
        18,
    ),
    (
        "convtranspose-output-shape",
        "ConvTranspose",
        {"output_shape": [10, 8], "strides": [3, 2]},
        [_f(1, 1, 3, 3), _f(1, 2, 3, 3)],
        18,
    ),
]


@pytest.mark.parametrize(
    ("op", "attrs", "inputs", "opset"),
    [c[1:] for c in INFERENCE_CASES],
    ids=[c[0] for c in INFERENCE_CASES],
)
def test_inference_ops_match_onnx_reference(
    op: str, attrs: dict[str, Any], inputs: list[np.ndarray], opset: int
) -> None:
    names = [f"in{i}" for i in range(len(inputs))]
    count = {
        "Split": 3,
        "TopK": 2,
        "Unique": 4,
        "CausalConvWithState": 2,
        "LinearAttention": 2,
        "BatchNormalization": 3,
    }.get(op, 1)
    outputs = [f"out{i}" for i in range(count)]
    node = helper.make_node(op, names, outputs, **attrs)
    feeds = dict(zip(names, inputs, strict=True))
    model = _model([node], feeds, {}, outputs, opset)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = TorchExecutor(model).inference(feeds)
    for name, w in zip(outputs, want, strict=True):
        w = np.asarray(w)
        assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
        np.testing.assert_allclose(
            got[name].astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-6
        )


def _recurrent_model(
    op: str, hidden: int, gates: int, direction: str
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    d = 2 if direction == "bidirectional" else 1
    feeds = {"x": _f(3, 2, 4)}
    params = {
        "w": _f(d, gates * hidden, 4) * 0.5,
        "r": _f(d, gates * hidden, hidden) * 0.5,
        "b": _f(d, 2 * gates * hidden) * 0.1,
    }
    outputs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    nodes = [
        helper.make_node(
            op, ["x", "w", "r", "b"], outputs, hidden_size=hidden, direction=direction
        ),
        helper.make_node("Mul", ["y", "y"], ["sq"]),
        helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    return _model(nodes, feeds, params, [*outputs, "loss"], 14), feeds


@pytest.mark.parametrize(("op", "gates"), [("LSTM", 4), ("GRU", 3)])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent_ops_match_the_reference_forward_and_backward(
    op: str, gates: int, direction: str
) -> None:
    model, feeds = _recurrent_model(op, 3, gates, direction)
    compare_with_reference(TorchExecutor, model, feeds, "loss")


def test_unique_unsorted_keeps_the_order_of_first_occurrence() -> None:
    x = np.array([[4, 2], [3, 4], [1, 2]], np.int64)
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], sorted=0)
    examples = [np.zeros(4, np.int64)] * 2 + [np.zeros(6, np.int64), np.zeros(4, np.int64)]
    model = _model([node], {"x": x}, {}, ["y", "first", "inverse", "counts"], 11, examples)
    out = TorchExecutor(model).inference({"x": x})
    assert out["y"].tolist() == [4, 2, 3, 1]
    assert out["first"].tolist() == [0, 1, 2, 4]
    assert out["inverse"].tolist() == [0, 1, 2, 0, 3, 1]
    assert out["counts"].tolist() == [2, 2, 1, 1]


def test_resize_and_grid_sample_pass_gradients_to_the_input() -> None:
    """Gradients through Resize (cubic) and GridSample against central differences."""
    x = RNG.standard_normal((1, 1, 3, 4))
    grid = np.clip(RNG.standard_normal((1, 2, 3, 2)), -0.9, 0.9)
    nodes = [
        helper.make_node("Resize", ["w", "", "scales"], ["r"], mode="cubic"),
        helper.make_node("GridSample", ["r", "grid"], ["g"], align_corners=1),
        helper.make_node("Mul", ["g", "g"], ["sq"]),
        helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    params = {"w": x, "scales": np.array([1, 1, 1.5, 1.25])}
    model = _model(nodes, {"grid": grid}, params, ["loss"], 20)
    ex = TorchExecutor(model)
    _, grads = ex.inference_and_backprop({"grid": grid}, "loss")
    direction = RNG.standard_normal(x.shape)
    eps = 1e-6
    losses = []
    for sign in (1, -1):
        ex.set_parameters({"w": x + sign * eps * direction})
        losses.append(float(ex.inference({"grid": grid})["loss"]))
    numeric = (losses[0] - losses[1]) / (2 * eps)
    np.testing.assert_allclose(float((grads["w"] * direction).sum()), numeric, rtol=1e-5)


def _body(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list[int] | None]],
          outputs: list[tuple[str, int, list[int] | None]]) -> onnx.GraphProto:  # fmt: skip
    return helper.make_graph(
        nodes,
        "body",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )


def test_if_loop_and_scan_match_onnx_reference_and_read_outer_values() -> None:
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    x = _f(3, 2)
    then = _body([helper.make_node("Mul", ["x", "x"], ["t"])], [], [("t", f, [3, 2])])
    other = _body([helper.make_node("Neg", ["x"], ["e"])], [], [("e", f, [3, 2])])
    loop = _body(
        [
            helper.make_node("Add", ["acc_in", "init"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=f),
            helper.make_node("Mul", ["acc_out", "fi"], ["scaled"]),
        ],
        [("i", i64, []), ("cond_in", b, []), ("acc_in", f, [2])],
        [("cond_out", b, []), ("acc_out", f, [2]), ("scaled", f, [2])],
    )
    scan = _body(
        [
            helper.make_node("Add", ["s_in", "row"], ["s_out"]),
            helper.make_node("Relu", ["s_out"], ["r"]),
        ],
        [("s_in", f, [2]), ("row", f, [2])],
        [("s_out", f, [2]), ("r", f, [2])],
    )
    nodes = [
        helper.make_node("If", ["c"], ["picked"], then_branch=then, else_branch=other),
        helper.make_node("Loop", ["trips", "go", "zeros"], ["total", "steps"], body=loop),
        helper.make_node("Scan", ["init", "x"], ["last", "runs"], body=scan, num_scan_inputs=1),
    ]  # fmt: skip
    feeds = {"x": x, "c": np.array(False), "trips": np.asarray(3), "go": np.array(True)}
    feeds.update(zeros=np.zeros(2, np.float32), init=_f(2))
    model = _model(nodes, feeds, {}, ["picked", "total", "steps", "last", "runs"], 16)
    ex = TorchExecutor(model)
    for cond in (False, True):
        feeds["c"] = np.array(cond)
        want = ReferenceEvaluator(model).run(None, feeds)
        got = ex.inference(feeds)
        for name, w in zip(["picked", "total", "steps", "last", "runs"], want, strict=True):
            np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6, err_msg=name)


def test_rnn_matches_onnx_reference() -> None:
    feeds = {"x": _f(3, 2, 4), "w": _f(2, 3, 4), "r": _f(2, 3, 3), "b": _f(2, 6)}
    node = helper.make_node(
        "RNN", list(feeds), ["y", "yh"], hidden_size=3, direction="bidirectional"
    )
    model = _model([node], feeds, {}, ["y", "yh"], 14)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = TorchExecutor(model).inference(feeds)
    for name, w in zip(["y", "yh"], want, strict=True):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6)


def test_supported_ops_are_exactly_the_translated_ones() -> None:
    from d5_plugin_torch.executor import _Translator

    methods = {
        n[3:] for n in dir(_Translator) if n.startswith("op_") and callable(getattr(_Translator, n))
    }
    assert TorchExecutor.supported_ops == methods
    assert {
        "Gather",
        "LayerNormalization",
        "LSTM",
        "GRU",
        "Attention",
        "ConstantOfShape",
    } <= methods


def test_operators_of_other_domains_are_refused() -> None:
    x = _f(2, 3)
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    graph = helper.make_graph(
        [node],
        "g",
        [_info("x", x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
    )
    model.ir_version = 8
    assert TorchExecutor.supports("Gelu") and not TorchExecutor.supports("Gelu", "com.microsoft")
    with pytest.raises(UsageError, match=r"does not support operator 'com.microsoft.Gelu'"):
        TorchExecutor(model)


def test_cast_to_a_type_torch_lacks_is_one_line_usage_error() -> None:
    feeds = {"x": _f(2)}
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)
    with pytest.raises(UsageError, match=r"node '.*' \(Cast\): element type STRING") as info:
        TorchExecutor(_model([node], feeds, {}, ["y"]))
    assert "\n" not in str(info.value)


def test_bfloat16_travels_in_and_out() -> None:
    import ml_dtypes

    x = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    node = helper.make_node("Mul", ["x", "x"], ["y"])
    model = _model([node], {"x": x}, {}, ["y"])
    out = TorchExecutor(model).inference({"x": x})["y"]
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out.astype(np.float32), (x.astype(np.float32)) ** 2)


def test_scalars_keep_their_rank() -> None:
    node = helper.make_node("Add", ["x", "c"], ["y"])
    model = _model(
        [node], {"x": np.asarray(2.0, np.float32)}, {"c": np.asarray(1.0, np.float32)}, ["y"]
    )
    out = TorchExecutor(model).inference({"x": np.asarray(2.0, np.float32)})["y"]
    assert out.shape == () and float(out) == 3.0
    assert torch.is_tensor(TorchExecutor(model).to_native({"x": np.asarray(1.0, np.float32)})["x"])
