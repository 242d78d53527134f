"""Patterns that exporters write into transformer graphs (Hugging Face BERT and GPT-2
through ``torch.onnx.export``), built small with ``onnx.helper`` and run on the MXNet
executor against the numpy reference: outputs and float64 gradients.

* BERT's embeddings read a position or token-type buffer: a constant sliced to the
  sequence length taken from ``Shape``, expanded to a shape computed by
  ``ConstantOfShape``/``Mul``/``Equal``/``Where``, and gathered with ``GatherElements``.
  All of it is folded when the graph is compiled; the buffer is wider than 32, which the
  onnx reference evaluator's own GatherElements cannot fold under numpy 1.x.
* GPT-2's causal mask is ``Trilu`` of ones expanded to a shape read from the scores
  (folded), then ``Equal``/``Where`` into an additive mask; ``Trilu`` of a tensor that
  depends on parameters runs as a mask in the graph and has a gradient.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from d5_plugin_mxnet.executor import MXNetExecutor
from d5_plugin_mxnet.graph import SUPPORTED_OPS
from d5_plugin_mxnet.graph.program import fold_node
from d5_plugin_numpy.executor import NumpyExecutor
from onnx import TensorProto, helper, numpy_helper

from d5core.api import UsageError
from d5core.testing.reference_agreement import compare_with_reference

BATCH, SEQ, WIDTH, BUFFER, VOCAB = 2, 6, 4, 40, 11


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name=name, value=numpy_helper.from_array(value, name)
    )


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[tuple[str, int, tuple[int, ...]]],
    inits: list[onnx.TensorProto],
) -> onnx.ModelProto:
    """A float64 model whose outputs are ``outputs`` (name, element type, shape) and a
    scalar ``loss``: the sum of the first output weighted by random constants, one per
    element."""
    rng = np.random.default_rng(3)
    nodes = [
        *nodes,
        _constant("weights", rng.standard_normal(outputs[0][2])),
        helper.make_node("Mul", [outputs[0][0], "weights"], ["weighted"], name="weigh"),
        helper.make_node("ReduceSum", ["weighted"], ["loss"], name="sum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "exported",
        inputs,
        [helper.make_tensor_value_info(*output) for output in outputs]
        + [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _tokens() -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("input_ids", TensorProto.INT64, [BATCH, SEQ])


def _bert_embeddings() -> onnx.ModelProto:
    """Word embeddings plus position embeddings read through BERT's exported buffer."""
    rng = np.random.default_rng(0)
    buffer = ((np.arange(BUFFER)[::-1] * 7) % BUFFER).reshape(1, BUFFER).astype(np.int64)
    nodes = [
        _constant("buffer", buffer),
        _constant("one", np.array(1, np.int64)),
        _constant("zero", np.array([0], np.int64)),
        _constant("axis1", np.array([1], np.int64)),
        _constant("two", np.array([2], np.int64)),
        _constant("minus_one", np.array(-1, np.int64)),
        _constant("pattern", np.array([1, -1], np.int64)),
        # the sequence length from the tokens' shape: a rank-0 Gather, unsqueezed
        helper.make_node("Shape", ["input_ids"], ["ids_shape"], name="shape"),
        helper.make_node("Gather", ["ids_shape", "one"], ["seq"], name="seq", axis=0),
        helper.make_node("Unsqueeze", ["seq", "zero"], ["seq1"], name="seq1"),
        helper.make_node("Slice", ["buffer", "zero", "seq1", "axis1"], ["sliced"], name="sl"),
        # Expand's shape as the exporter computes it: where(ones*-1 == pattern, ones, pattern)
        helper.make_node(
            "ConstantOfShape",
            ["two"],
            ["ones"],
            name="ones",
            value=numpy_helper.from_array(np.array([1], np.int64)),
        ),
        helper.make_node("Mul", ["ones", "minus_one"], ["negated"], name="neg"),
        helper.make_node("Equal", ["pattern", "negated"], ["equal"], name="eq"),
        helper.make_node("Where", ["equal", "ones", "pattern"], ["target"], name="where"),
        helper.make_node("Expand", ["buffer", "target"], ["expanded"], name="expand"),
        # a gather of SEQ of the BUFFER columns (more than 32), with a negative index
        _constant(
            "positions",
            np.array([[0, 5, -1, 17, 33, -BUFFER][:SEQ]], np.int64),
        ),
        helper.make_node(
            "GatherElements", ["expanded", "positions"], ["gathered"], name="ge", axis=1
        ),
        helper.make_node("Add", ["gathered", "sliced"], ["mixed"], name="mix"),
        helper.make_node("Expand", ["mixed", "ids_shape"], ["position_ids"], name="pos"),
        helper.make_node("Gather", ["words", "input_ids"], ["word_vec"], name="wv"),
        helper.make_node("Gather", ["places", "position_ids"], ["place_vec"], name="pv"),
        helper.make_node("Add", ["word_vec", "place_vec"], ["embedded"], name="emb"),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((VOCAB, WIDTH)), "words"),
        numpy_helper.from_array(rng.standard_normal((2 * BUFFER, WIDTH)), "places"),
    ]
    outputs = [("embedded", TensorProto.DOUBLE, (BATCH, SEQ, WIDTH))]
    outputs.append(("position_ids", TensorProto.INT64, (BATCH, SEQ)))
    return _model(nodes, [_tokens()], outputs, inits)


def _token_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"input_ids": rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64)}


def test_the_bert_position_buffer_folds_and_agrees_with_the_reference() -> None:
    model = _bert_embeddings()
    compare_with_reference(MXNetExecutor, model, _token_feeds(), "loss")
    got = MXNetExecutor(model).inference(_token_feeds())["position_ids"]
    buffer = ((np.arange(BUFFER)[::-1] * 7) % BUFFER).astype(np.int64)
    picks = np.array([0, 5, -1, 17, 33, -BUFFER][:SEQ]) % BUFFER
    np.testing.assert_array_equal(got, np.broadcast_to(buffer[picks] + buffer[:SEQ], (2, SEQ)))


def test_gather_elements_folds_more_than_32_choices_on_any_axis() -> None:
    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 45, 2))
    for axis in (0, 1, -1):
        size = data.shape[axis]
        shape = list(data.shape)
        shape[axis] = 5
        index = rng.integers(-size, size, shape).astype(np.int64)
        node = helper.make_node("GatherElements", ["d", "i"], ["o"], name="ge", axis=axis)
        (got,) = fold_node(node, [data, index], 17)
        want = np.take_along_axis(data, index % size, axis=axis)
        np.testing.assert_array_equal(got, want)


def test_a_gather_elements_index_out_of_range_is_one_line() -> None:
    node = helper.make_node("GatherElements", ["d", "i"], ["o"], name="ge", axis=1)
    data, index = np.zeros((1, 40)), np.array([[40]], np.int64)
    with pytest.raises(UsageError, match=r"node 'ge' \(GatherElements\): cannot compute") as info:
        fold_node(node, [data, index], 17)
    assert "\n" not in str(info.value)


def test_gather_elements_of_a_trained_tensor_over_many_columns_has_its_gradient() -> None:
    rng = np.random.default_rng(4)
    index = rng.integers(-BUFFER, BUFFER, (BATCH, SEQ)).astype(np.int64)
    nodes = [
        _constant("index", index),
        helper.make_node("Mul", ["x", "scale"], ["scaled"], name="scale"),
        helper.make_node("GatherElements", ["scaled", "index"], ["out"], name="ge", axis=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [BATCH, BUFFER])
    scale = numpy_helper.from_array(rng.standard_normal((1, BUFFER)), "scale")
    model = _model(nodes, [x], [("out", TensorProto.DOUBLE, (BATCH, SEQ))], [scale])
    compare_with_reference(
        MXNetExecutor, model, {"x": rng.standard_normal((BATCH, BUFFER))}, "loss"
    )


def _attention(
    mask_nodes: list[onnx.NodeProto], masked: str, shape: tuple[int, ...] = (BATCH, SEQ, SEQ)
) -> onnx.ModelProto:
    """Scores ``h @ h^T`` of ``h = x @ w`` (BATCH, SEQ, SEQ), ``mask_nodes`` reading
    ``scores`` and writing ``masked`` (of ``shape``), then a softmax."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="h"),
        helper.make_node("Transpose", ["h"], ["ht"], name="ht", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["h", "ht"], ["scores"], name="scores"),
        *mask_nodes,
        helper.make_node("Softmax", [masked], ["probs"], name="softmax", axis=-1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [BATCH, SEQ, WIDTH])
    w = numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)) * 0.5, "w")
    outputs = [("probs", TensorProto.DOUBLE, shape), (masked, TensorProto.DOUBLE, shape)]
    return _model(nodes, [x], outputs, [w])


def _x() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(6).standard_normal((BATCH, SEQ, WIDTH))}


def test_the_gpt2_causal_mask_from_shape_derived_ones_agrees_with_the_reference() -> None:
    nodes = [
        _constant("one_f", np.array([1.0], np.float64)),
        _constant("at_minus_2", np.array([-2], np.int64)),
        _constant("at_minus_1", np.array([-1], np.int64)),
        _constant("end", np.array([np.iinfo(np.int64).max], np.int64)),
        _constant("zero_f", np.array(0.0, np.float64)),
        _constant("blocked", np.array(-1e4, np.float64)),
        helper.make_node("Shape", ["scores"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "at_minus_2", "at_minus_1"], ["rows"], name="rows"),
        helper.make_node("Slice", ["s", "at_minus_1", "end"], ["cols"], name="cols"),
        helper.make_node("Concat", ["rows", "cols"], ["square"], name="square", axis=0),
        helper.make_node("Expand", ["one_f", "square"], ["ones"], name="ones"),
        helper.make_node("Trilu", ["ones"], ["lower"], name="trilu", upper=0),
        helper.make_node("Equal", ["lower", "zero_f"], ["above"], name="above"),
        helper.make_node("Where", ["above", "blocked", "zero_f"], ["bias"], name="bias"),
        helper.make_node("Add", ["scores", "bias"], ["masked"], name="masked"),
    ]
    model = _attention(nodes, "masked")
    compare_with_reference(MXNetExecutor, model, _x(), "loss")
    probs = MXNetExecutor(model).inference(_x())["probs"]
    assert np.all(probs[:, np.triu_indices(SEQ, 1)[0], np.triu_indices(SEQ, 1)[1]] < 1e-3)


@pytest.mark.parametrize(
    ("upper", "k"), [(0, None), (1, None), (0, -1), (1, 2), (1, -SEQ), (0, SEQ + 1)]
)
def test_trilu_of_trained_scores_is_a_mask_with_its_gradient(upper: int, k: int | None) -> None:
    nodes = [] if k is None else [_constant("k", np.array(k, np.int64))]
    nodes.append(
        helper.make_node(
            "Trilu", ["scores"] + ([] if k is None else ["k"]), ["kept"], name="t", upper=upper
        )
    )
    compare_with_reference(MXNetExecutor, _attention(nodes, "kept"), _x(), "loss")


def test_trilu_of_a_matrix_with_k_computed_from_a_shape_agrees_with_the_reference() -> None:
    nodes = [
        _constant("last", np.array(-1, np.int64)),
        _constant("three", np.array(3, np.int64)),
        helper.make_node("Reshape", ["scores", "flat"], ["matrix"], name="matrix"),
        helper.make_node("Shape", ["matrix"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "last"], ["n"], name="n", axis=0),
        helper.make_node("Sub", ["n", "three"], ["k"], name="k"),  # rank 0: SEQ - 3
        helper.make_node("Trilu", ["matrix", "k"], ["kept"], name="t", upper=0),
    ]
    model = _attention(nodes, "kept", (BATCH * SEQ, SEQ))
    model.graph.initializer.append(
        numpy_helper.from_array(np.array([BATCH * SEQ, SEQ], np.int64), "flat")
    )
    compare_with_reference(MXNetExecutor, model, _x(), "loss")


def test_trilu_of_a_comparison_keeps_bool() -> None:
    nodes = [
        _constant("zero_f", np.array(0.0, np.float64)),
        helper.make_node("Greater", ["scores", "zero_f"], ["positive"], name="gt"),
        helper.make_node("Trilu", ["positive"], ["kept"], name="t", upper=1),
        helper.make_node("Where", ["kept", "scores", "zero_f"], ["masked"], name="where"),
    ]
    model = _attention(nodes, "masked")
    kept = helper.make_tensor_value_info("kept", TensorProto.BOOL, (BATCH, SEQ, SEQ))
    model.graph.output.append(kept)
    compare_with_reference(MXNetExecutor, model, _x(), "loss")
    ref = NumpyExecutor(model).inference(_x())["kept"]
    got = MXNetExecutor(model).inference(_x())["kept"]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref)


def test_trilu_of_a_vector_is_refused_in_one_line() -> None:
    nodes = [
        helper.make_node("ReduceSum", ["scores", "axes"], ["rowsum"], name="rs", keepdims=0),
        helper.make_node("Reshape", ["rowsum", "flat"], ["vector"], name="vec"),
        helper.make_node("Trilu", ["vector"], ["kept"], name="t"),
    ]
    model = _attention(nodes, "kept", (BATCH * SEQ,))
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([2], np.int64), "axes"),
            numpy_helper.from_array(np.array([BATCH * SEQ], np.int64), "flat"),
        ]
    )
    with pytest.raises(UsageError, match=r"node 't' \(Trilu\): the input needs rank 2") as info:
        MXNetExecutor(model).inference(_x())
    assert "\n" not in str(info.value)


def test_trilu_and_split_are_supported() -> None:
    assert {"Trilu", "Split", "GatherElements"} <= SUPPORTED_OPS
