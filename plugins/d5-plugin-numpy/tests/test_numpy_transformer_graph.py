"""The numpy executor runs graphs of the transformer operators: int64 shapes and
boolean masks flow between nodes, constant subgraphs fold, older opsets are translated,
and training differentiates through every floating path."""

from __future__ import annotations

import numpy as np
import onnx
from d5_plugin_numpy.executor import NumpyExecutor
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

B, T, D, V = 2, 3, 4, 5
RNG = np.random.default_rng(17)


def _init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def attention_model(dtype: int = TensorProto.DOUBLE) -> onnx.ModelProto:
    """An embedding, a position slice sized by a runtime Shape, LayerNormalization, a
    causally masked self-attention (bool mask, Where), Gelu and reductions to a loss."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)

    def f(*shape: int) -> np.ndarray:
        return (RNG.standard_normal(shape) * 0.5).astype(np_dtype)

    n = helper.make_node
    nodes = [
        n("Gather", ["emb", "ids"], ["e"]),
        n("Shape", ["e"], ["e_shape"]),
        n("Gather", ["e_shape", "one"], ["t"]),  # runtime int64 scalar
        n("Unsqueeze", ["t", "zero_axis"], ["t1"]),
        n("Slice", ["pos", "zero_axis", "t1", "zero_axis"], ["p"]),
        n("Add", ["e", "p"], ["h"]),
        n("LayerNormalization", ["h", "ln_scale", "ln_bias"], ["nrm", "mu", "inv"], axis=-1),
        n("MatMul", ["nrm", "w"], ["q"]),
        n("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "qt"], ["scores"]),
        n("Equal", ["tri", "one"], ["mask"]),  # folds: int64 parameter and constant
        n("Where", ["mask", "scores", "neg"], ["masked"]),
        n("Softmax", ["masked"], ["attn"], axis=-1),
        n("MatMul", ["attn", "q"], ["ctx"]),
        n("Gelu", ["ctx"], ["g"]),
        n("Cast", ["g"], ["g64"], to=dtype),  # float32 would round beyond the gradcheck
        n("Pow", ["g64", "two"], ["sq"]),
        n("ReduceMean", ["sq", "last_axis"], ["ms"]),
        n("Add", ["ms", "eps"], ["ms_eps"]),
        n("Sqrt", ["ms_eps"], ["rms"]),
        n("Div", ["g64", "rms"], ["normed"]),
        n("Shape", ["x"], ["x_shape"]),
        n("Expand", ["bias", "x_shape"], ["bias_full"]),
        n("Mul", ["normed", "x"], ["mixed"]),
        n("Add", ["mixed", "bias_full"], ["out"]),
        n("Erf", ["out"], ["erf"]),
        n("Exp", ["erf"], ["ex"]),
        n("Log", ["ex"], ["lg"]),
        n("Shape", ["x"], ["xs2"], start=1),
        n(
            "ConstantOfShape",
            ["xs2"],
            ["ones"],
            value=numpy_helper.from_array(np.ones(1, np_dtype)),
        ),
        n("Mul", ["lg", "ones"], ["lg1"]),
        n("ReduceMax", ["lg1", "last_axis"], ["mx"], keepdims=0),
        n("Less", ["mx", "zero_f"], ["neg_mask"]),
        n("Cast", ["neg_mask"], ["neg_f"], to=dtype),
        n("Mul", ["mx", "neg_f"], ["mx_neg"]),
        n("GatherElements", ["lg1", "pick"], ["picked"], axis=2),
        n("ReduceSum", ["picked"], ["s1"], keepdims=0),
        n("ReduceSum", ["mx_neg"], ["s2"], keepdims=0),
        n("Add", ["s1", "s2"], ["loss"]),
    ]
    tri = np.tril(np.ones((T, T), dtype=np.int64))
    initializers = [
        _init("emb", f(V, D)),
        _init("pos", f(T + 2, D)),
        _init("ln_scale", 1 + f(D)),
        _init("ln_bias", f(D)),
        _init("w", f(D, D)),
        _init("bias", f(D)),
        _init("tri", tri),
        _init("one", np.array(1, np.int64)),
        _init("zero_axis", np.array([0], np.int64)),
        _init("last_axis", np.array([-1], np.int64)),
        _init("neg", np.array(-1e9, np_dtype)),
        _init("two", np.array(2.0, np_dtype)),
        _init("eps", np.array(1e-3, np_dtype)),
        _init("zero_f", np.array(0.0, np_dtype)),
        _init("pick", RNG.integers(0, D, (B, T, 2)).astype(np.int64)),
    ]
    graph = helper.make_graph(
        nodes,
        "attention",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [B, T]),
            helper.make_tensor_value_info("x", dtype, [B, T, D]),
        ],
        [
            helper.make_tensor_value_info("loss", dtype, []),
            helper.make_tensor_value_info("attn", dtype, [B, T, T]),
        ],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    return model


def feeds(dtype: type = np.float64) -> dict[str, np.ndarray]:
    return {
        "ids": RNG.integers(0, V, (B, T)).astype(np.int64),
        "x": RNG.uniform(0.5, 1.5, (B, T, D)).astype(dtype),
    }


def test_inference_matches_onnx_reference() -> None:
    model = attention_model()
    inputs = feeds()
    got = NumpyExecutor(model).inference(inputs)
    loss, attn = ReferenceEvaluator(model).run(None, inputs)
    np.testing.assert_allclose(got["attn"], attn, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got["loss"], loss, rtol=1e-6)
    assert np.allclose(np.triu(got["attn"][0], 1), 0)  # the boolean mask was applied


def test_float32_inference_matches_onnx_reference_at_another_batch_size() -> None:
    model = attention_model(TensorProto.FLOAT)
    inputs = {
        "ids": RNG.integers(0, V, (B + 1, T)).astype(np.int64),
        "x": RNG.uniform(0.5, 1.5, (B + 1, T, D)).astype(np.float32),
    }
    got = NumpyExecutor(model).inference(inputs)
    assert got["attn"].dtype == np.float32 and got["attn"].shape == (B + 1, T, T)
    expected = ReferenceEvaluator(model).run(None, {k: v[:B] for k, v in inputs.items()})
    np.testing.assert_allclose(got["attn"][:B], expected[1], rtol=1e-4, atol=1e-6)


def test_constant_subgraphs_fold_and_runtime_shapes_stay_steps() -> None:
    executor = NumpyExecutor(attention_model())
    folded = set(executor._constants)
    assert {"mask"} <= folded
    assert np.asarray(executor._constants["mask"]).dtype == np.bool_
    assert not {"e_shape", "t", "ones", "x_shape"} & folded
    assert not executor.fallback  # every node ran on d5's own operators


def test_training_gradients_match_central_differences() -> None:
    model = attention_model()
    inputs = feeds()
    executor = NumpyExecutor(model)
    _, grads = executor.inference_and_backprop(inputs, "loss")
    params = executor.get_parameters()
    assert {"emb", "pos", "ln_scale", "ln_bias", "w", "bias"} <= set(grads)
    rng = np.random.default_rng(0)
    for name in ("emb", "pos", "ln_scale", "ln_bias", "w", "bias"):
        direction = rng.standard_normal(params[name].shape)
        h = 1e-6

        def loss_at(step: float, name: str = name, direction: np.ndarray = direction) -> float:
            executor.set_parameters({name: params[name] + step * direction})
            return float(executor.inference(inputs)["loss"])

        numeric = (loss_at(h) - loss_at(-h)) / (2 * h)
        executor.set_parameters({name: params[name]})
        analytic = float(np.vdot(grads[name], direction))
        assert abs(numeric - analytic) <= 1e-5 * max(1.0, abs(numeric)), (name, numeric, analytic)
    # the rows of pos past the sequence get nothing; the embedding rows never looked up too
    np.testing.assert_array_equal(grads["pos"][T:], 0)
    unused = sorted(set(range(V)) - set(inputs["ids"].reshape(-1).tolist()))
    np.testing.assert_array_equal(grads["emb"][unused], 0)


def _one_node(
    node: onnx.NodeProto, opset: int, x: np.ndarray, out_shape: list[int]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, out_shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_older_opsets_are_translated() -> None:
    x = RNG.standard_normal((3, 4, 5))
    cases = [
        (helper.make_node("ReduceSum", ["x"], ["y"], axes=[0, 2], keepdims=0), 11, [4]),
        (helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1]), 13, [3, 4, 1]),
        (helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0), 17, [3, 5]),
        (
            helper.make_node("Slice", ["x"], ["y"], starts=[1, -2], ends=[3, 100], axes=[0, 2]),
            9,
            [2, 4, 2],
        ),
        (helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[-1]), 1, [1, 4, 5]),
    ]
    for node, opset, shape in cases:
        model = _one_node(node, opset, x, shape)
        (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
        got = NumpyExecutor(model).inference({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-12, err_msg=f"{node.op_type} {opset}")


def test_shape_of_a_parameter_folds() -> None:
    n = helper.make_node
    nodes = [
        n("Shape", ["w"], ["w_shape"]),
        n("Reshape", ["x", "w_shape"], ["y"]),
        n("Mul", ["y", "w"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [6])],
        [helper.make_tensor_value_info("z", TensorProto.DOUBLE, [2, 3])],
        [_init("w", RNG.standard_normal((2, 3)))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    executor = NumpyExecutor(model)
    np.testing.assert_array_equal(executor._constants["w_shape"], [2, 3])
    x = RNG.standard_normal(6)
    _, grads = executor.inference_and_backprop({"x": x}, "z")
    np.testing.assert_allclose(grads["w"], x.reshape(2, 3))
