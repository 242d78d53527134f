"""The TensorFlow executor runs the operators of transformer and recurrent models, forward
against onnxruntime and backward against central differences (float64).

The graphs are built here: a causal self-attention block whose shapes are computed by
Shape, Gather, Concat and Range nodes (as exporters write them), small graphs of one
operator family each, and LSTM and GRU layers in every direction and layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from d5_plugin_tensorflow.executor import TensorFlowExecutor
from d5_plugin_tensorflow.operators import TensorFlowBackend
from d5_plugin_tensorflow.ops.transformer import TRANSFORMER_OPERATORS
from onnx import TensorProto, helper, numpy_helper

from d5core.errors import UsageError
from d5core.testing.operator_agreement import (
    PROPERTIES,
    OperatorAgreementTests,
    property_examples,
)
from d5core.validate import Tolerance

OPSET = 20
B, T, D, H = 2, 4, 8, 2


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[str],
    inits: dict[str, np.ndarray],
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "g",
        list(inputs),
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return _typed_outputs(model)


def _typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the types shape inference finds for its outputs."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    found = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for value in model.graph.output:
        if value.name in found and found[value.name].type.tensor_type.elem_type:
            value.CopyFrom(found[value.name])
    return model


def attention_block(dtype: type = np.float32, seed: int = 0) -> onnx.ModelProto:
    """Embedding, LayerNorm, causal two-head attention, a GELU MLP, and a scalar loss."""
    rng = np.random.default_rng(seed)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def w(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    inits = {
        "emb": w(11, D),
        "ln_g": (1 + w(D, scale=0.1)).astype(dtype),
        "ln_b": w(D, scale=0.1),
        "wq": w(D, D),
        "wk": w(D, D),
        "wv": w(D, D),
        "w1": w(D, 2 * D),
        "w2": w(2 * D, D),
        "i0": np.array(0, np.int64),
        "i1": np.array(1, np.int64),
        "heads": np.array([H, D // H], np.int64),
        "minus": np.array([-1], np.int64),
        "one": np.array(1, np.int64),
        "scale": np.array(np.sqrt(D // H), dtype),
        "big": np.array(-1e4, dtype),
        "ax_last": np.array([-1], np.int64),
        "ax_all": np.array([0, 1, 2], np.int64),
    }
    n = helper.make_node
    nodes = [
        n("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, dtype))),
        n("Gather", ["emb", "tokens"], ["e"], axis=0),
        n("Add", ["e", "x"], ["h"]),
        n("LayerNormalization", ["h", "ln_g", "ln_b"], ["ln"], axis=-1, epsilon=1e-5),
        n("Shape", ["ln"], ["shp"]),
        n("Gather", ["shp", "i0"], ["bsz"]),
        n("Gather", ["shp", "i1"], ["tlen"]),
        n("Unsqueeze", ["bsz", "i0"], ["bsz1"]),
        n("Unsqueeze", ["tlen", "i0"], ["tlen1"]),
        n("Concat", ["bsz1", "tlen1", "heads"], ["split_shape"], axis=0),
        n("Concat", ["bsz1", "tlen1", "minus"], ["merge_shape"], axis=0),
        *[n("MatMul", ["ln", f"w{p}"], [f"{p}0"]) for p in "qkv"],
        *[n("Reshape", [f"{p}0", "split_shape"], [f"{p}1"]) for p in "qkv"],
        n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kt"], ["s0"]),
        n("Div", ["s0", "scale"], ["s1"]),
        n("Range", ["i0", "tlen", "one"], ["pos"]),
        n("Unsqueeze", ["pos", "one"], ["pos_col"]),
        n("Less", ["pos_col", "pos"], ["future"]),
        n("Where", ["future", "big", "s1"], ["s2"]),
        n("Softmax", ["s2"], ["p"], axis=-1),
        n("MatMul", ["p", "v"], ["a0"]),
        n("Transpose", ["a0"], ["a1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["a1", "merge_shape"], ["a"]),
        n("Add", ["a", "h"], ["r"]),
        n("MatMul", ["r", "w1"], ["m0"]),
        n("Gelu", ["m0"], ["m1"]),
        n("MatMul", ["m1", "w2"], ["m2"]),
        n("Add", ["m2", "r"], ["y"]),
        n("Pow", ["y", "two"], ["y2"]),
        n("ReduceMean", ["y2", "ax_last"], ["ms"], keepdims=1),
        n("Sqrt", ["ms"], ["rms"]),
        n("ReduceSum", ["rms", "ax_all"], ["loss"], keepdims=0),
    ]
    inputs = [
        helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", T]),
        helper.make_tensor_value_info("x", elem, ["batch", T, D]),
    ]
    return _model(nodes, inputs, ["y", "loss"], inits)


def _feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for v in model.graph.input:
        shape = [d.dim_value or B for d in v.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.integer):
            feeds[v.name] = rng.integers(0, 11, shape).astype(dtype)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _batch_first_by_ort(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The outputs of a recurrent layer with ``layout=1`` (which onnxruntime refuses)
    from onnxruntime running the same layer with ``layout=0`` on transposed feeds."""
    seq_first = onnx.ModelProto()
    seq_first.CopyFrom(model)
    node = seq_first.graph.node[0]
    for attribute in node.attribute:
        if attribute.name == "layout":
            attribute.i = 0
    moved = {k: np.swapaxes(v, 0, 1) if v.ndim == 3 else v for k, v in feeds.items()}
    for value in seq_first.graph.input:
        dims = value.type.tensor_type.shape.dim
        if len(dims) == 3:
            first, second = dims[0].dim_value, dims[1].dim_value
            dims[0].dim_value, dims[1].dim_value = second, first
    del seq_first.graph.output[:]
    seq_first.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in node.output)
    outs = _ort(_typed_outputs(seq_first), moved)
    perms = {"y": (2, 0, 1, 3), "yh": (1, 0, 2), "yc": (1, 0, 2)}
    return {k: np.transpose(v, perms[k]) for k, v in outs.items()}


def _agree(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    rtol: float = 1e-4,
    expected: Callable[..., dict[str, np.ndarray]] | None = None,
) -> None:
    got = TensorFlowExecutor(model).inference(feeds)
    for name, want in (expected or _ort)(model, feeds).items():
        assert got[name].shape == want.shape, name
        assert got[name].dtype == want.dtype, name
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=1e-5, err_msg=name)


def _check_gradients(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], loss: str, picks: int = 4
) -> None:
    """Each trainable parameter's gradient against central differences at a few entries."""
    ex = TensorFlowExecutor(model)
    _, grads = ex.inference_and_backprop(feeds, loss)
    params = ex.get_parameters()
    rng = np.random.default_rng(3)
    step = 1e-6
    for name, grad in grads.items():
        base = params[name]
        for flat in rng.choice(base.size, size=min(picks, base.size), replace=False):
            values = []
            for sign in (1, -1):
                moved = base.copy()
                moved.reshape(-1)[flat] += sign * step
                ex.set_parameters({name: moved})
                values.append(float(np.sum(ex.inference(feeds)[loss])))
            ex.set_parameters({name: base})
            numeric = (values[0] - values[1]) / (2 * step)
            assert grad.reshape(-1)[flat] == pytest.approx(numeric, rel=1e-4, abs=1e-6), name


def test_the_attention_block_matches_onnxruntime() -> None:
    model = attention_block()
    _agree(model, _feeds(model))


def test_the_attention_block_gradients_match_central_differences() -> None:
    model = attention_block(np.float64)
    _check_gradients(model, _feeds(model), "loss")


def test_a_new_batch_size_recompiles_the_computed_shapes() -> None:
    model = attention_block()
    ex = TensorFlowExecutor(model)
    for batch in (2, 3):
        rng = np.random.default_rng(batch)
        feeds = {
            "tokens": rng.integers(0, 11, (batch, T)).astype(np.int64),
            "x": rng.standard_normal((batch, T, D)).astype(np.float32),
        }
        want = _ort(model, feeds)
        np.testing.assert_allclose(ex.inference(feeds)["y"], want["y"], rtol=1e-4, atol=1e-5)


def _one(
    op: str,
    inputs: dict[str, np.ndarray],
    inits: dict[str, np.ndarray] | None = None,
    outputs: Sequence[str] = ("y",),
    **attrs: Any,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A graph of one ``op`` node: ``inputs`` fed, ``inits`` initializers."""
    inits = inits or {}
    names = [*inputs, *inits]
    node = helper.make_node(op, names, list(outputs), **attrs)
    values = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in inputs.items()
    ]
    return _model([node], values, list(outputs), inits), inputs


RNG = np.random.default_rng(5)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES: dict[str, Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]] = {
    "gather_axis1_negative": lambda: _one(
        "Gather", {"x": _f(3, 5, 2)}, {"i": np.array([[-1, 0], [2, 4]], np.int64)}, axis=1
    ),
    "gather_scalar_index": lambda: _one(
        "Gather", {"x": _f(3, 5)}, {"i": np.array(-2, np.int64)}, axis=1
    ),
    "gather_elements": lambda: _one(
        "GatherElements",
        {"x": _f(3, 4)},
        {"i": np.array([[0, -1, 2], [3, 1, 0]], np.int64)},
        axis=1,
    ),
    "slice_negative_step": lambda: _one(
        "Slice",
        {"x": _f(4, 6)},
        {
            "s": np.array([-1, 1], np.int64),
            "e": np.array([-100, 5], np.int64),
            "a": np.array([0, 1], np.int64),
            "t": np.array([-2, 2], np.int64),
        },
    ),
    "expand": lambda: _one("Expand", {"x": _f(3, 1)}, {"s": np.array([2, 1, 4], np.int64)}),
    "where_broadcast": lambda: _one(
        "Where", {"c": RNG.random((3, 1)) > 0.5, "a": _f(1, 4), "b": _f(3, 4)}
    ),
    "equal_int": lambda: _one(
        "Equal", {"a": np.array([1, 2, 3], np.int64)}, {"b": np.array([[1], [3]], np.int64)}
    ),
    "greater": lambda: _one("Greater", {"a": _f(2, 3), "b": _f(3)}),
    "cast_to_bool_and_int": lambda: _one("Cast", {"x": _f(2, 3) * 3}, to=TensorProto.BOOL),
    "cast_float_to_int": lambda: _one("Cast", {"x": _f(2, 3) * 3}, to=TensorProto.INT32),
    "pow_elementwise": lambda: _one("Pow", {"x": np.abs(_f(2, 3)) + 0.5, "p": _f(2, 3)}),
    "erf_exp_log": lambda: _one("Erf", {"x": _f(5)}),
    "gelu_tanh": lambda: _one("Gelu", {"x": _f(2, 5)}, approximate="tanh"),
    "reduce_max_keep": lambda: _one(
        "ReduceMax", {"x": _f(2, 3, 4)}, {"a": np.array([0, 2], np.int64)}, keepdims=1
    ),
    "reduce_sum_all": lambda: _one("ReduceSum", {"x": _f(2, 3)}, keepdims=0),
    "layer_norm_axis1_stats": lambda: _one(
        "LayerNormalization",
        {"x": _f(2, 3, 4)},
        {"g": _f(3, 4), "b": _f(3, 4)},
        outputs=("y", "mean", "inv"),
        axis=1,
    ),
    "constant_of_shape_fed": lambda: _one(
        "ConstantOfShape",
        {"s": np.array([2, 3], np.int64)},
        value=numpy_helper.from_array(np.array([1.5], np.float32)),
    ),
    "batched_broadcast_matmul": lambda: _one("MatMul", {"a": _f(2, 1, 3, 4), "b": _f(3, 4, 5)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_operator_matches_onnxruntime(case: str) -> None:
    _agree(*CASES[case]())


def _recurrent(
    op: str, direction: str, layout: int, lens: bool, dtype: type = np.float32
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    gates, hidden, width, steps, batch = (4 if op == "LSTM" else 3), 3, 2, 4, 2
    dirs = 2 if direction == "bidirectional" else 1
    inits = {
        "W": (rng.standard_normal((dirs, gates * hidden, width)) * 0.5).astype(dtype),
        "R": (rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5).astype(dtype),
        "B": (rng.standard_normal((dirs, 2 * gates * hidden)) * 0.2).astype(dtype),
    }
    x_shape = (batch, steps, width) if layout else (steps, batch, width)
    names = ["x", "W", "R", "B", "lens" if lens else "", "h0"]
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds = {
        "x": rng.standard_normal(x_shape).astype(dtype),
        "h0": rng.standard_normal(state_shape).astype(dtype),
    }
    if lens:
        feeds["lens"] = np.array([steps, steps - 2], np.int32)
    outputs = ["y", "yh"]
    attrs: dict[str, Any] = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op == "LSTM":
        names += ["c0", "P"]
        feeds["c0"] = rng.standard_normal(state_shape).astype(dtype)
        inits["P"] = (rng.standard_normal((dirs, 3 * hidden)) * 0.3).astype(dtype)
        outputs.append("yc")
    else:
        attrs["linear_before_reset"] = 1 if direction == "reverse" else 0
    node = helper.make_node(op, names, outputs, **attrs)
    values = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    return _model([node], values, outputs, inits), feeds


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize(
    ("direction", "layout", "lens"),
    [("forward", 0, False), ("reverse", 1, True), ("bidirectional", 0, True)],
)
def test_recurrent_layers_match_onnxruntime(
    op: str, direction: str, layout: int, lens: bool
) -> None:
    model, feeds = _recurrent(op, direction, layout, lens)
    _agree(model, feeds, expected=_batch_first_by_ort if layout else _ort)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_recurrent_layer_gradients_match_central_differences(op: str) -> None:
    model, feeds = _recurrent(op, "bidirectional", 0, True, np.float64)
    sums = helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)
    model.graph.node.append(sums)
    model.graph.output.append(helper.make_empty_tensor_value_info("loss"))
    model = _typed_outputs(model)
    _check_gradients(model, feeds, "loss")


def test_a_static_input_computed_from_a_feed_value_is_read_per_value() -> None:
    model, feeds = _one("Reshape", {"x": _f(2, 6), "s": np.array([3, 4], np.int64)})
    ex = TensorFlowExecutor(model)
    assert ex.inference(feeds)["y"].shape == (3, 4)
    assert ex.inference({**feeds, "s": np.array([4, 3], np.int64)})["y"].shape == (4, 3)


def test_an_unsupported_activation_is_one_line_naming_the_node() -> None:
    model, _ = _recurrent("GRU", "forward", 0, False)
    model.graph.node[0].attribute.append(helper.make_attribute("activations", ["Swish", "Tanh"]))
    with pytest.raises(UsageError, match=r"\(GRU\): activation Swish is not supported") as info:
        TensorFlowExecutor(model)
    assert "\n" not in str(info.value)


def test_supported_ops_name_the_transformer_and_recurrent_operators() -> None:
    wanted = {
        "Gather", "GatherElements", "Slice", "Shape", "ConstantOfShape", "Expand", "Where",
        "Equal", "Less", "Greater", "Cast", "Pow", "Sqrt", "Erf", "Exp", "Log", "Gelu",
        "ReduceMean", "ReduceSum", "ReduceMax", "LayerNormalization", "MatMul", "LSTM", "GRU",
    }  # fmt: skip
    assert wanted <= TensorFlowExecutor.supported_ops


class TestTensorFlowTransformerOperatorsAgreeWithTheReference(OperatorAgreementTests):
    """The level-0 operators of transformer and recurrent models, on the kit's
    properties. In float64 TensorFlow's erf and the unrolled recurrent products round
    differently from numpy by up to about 1e-8 (absolute) in gradients."""

    backend = TensorFlowBackend()
    operators = tuple(cls.op_type for cls in TRANSFORMER_OPERATORS)
    examples = property_examples(3)
    default_problem_dtypes = ("float32",)
    tolerances = MappingProxyType({"float64": Tolerance(rtol=1e-6, atol=1e-8)})

    def test_backend_offers_the_declared_operators_and_each_has_a_property(self) -> None:
        """test_tf_operators.py's kit classes cover the backend's other operators."""
        assert set(self.operator_types()) <= set(self.backend.supported())
        assert set(self.operator_types()) <= set(PROPERTIES)
