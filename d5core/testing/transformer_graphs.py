"""A graph executor runs the operators of transformer and recurrent models: a test kit for
framework plugins.

The graphs are built here: a causal self-attention block whose shapes are computed by
Shape, Gather, Concat and Range nodes (as exporters write them), graphs of one operator
each, and LSTM and GRU layers in every direction and layout. The executor's outputs are
compared with onnxruntime's and its gradients (in float64) with central differences.

A plugin author subclasses :class:`TransformerExecutorTests` in a test module and names
the executor class, and (for the plugin's level-0 operators made with
:func:`d5core.api.graph_operator_classes`) :class:`GraphOperatorTests` naming the
backend::

    from d5core.testing.transformer_graphs import GraphOperatorTests, TransformerExecutorTests
    from my_plugin.executor import MyExecutor
    from my_plugin.operators import MyBackend

    class TestMyExecutorRunsTransformers(TransformerExecutorTests):
        executor = MyExecutor

    class TestMyTransformerOperatorsAgreeWithTheReference(GraphOperatorTests):
        backend = MyBackend()

:class:`CNNOperatorTests` is the operator kit for the same backend's other operators.
Import this module in tests only: it imports pytest and hypothesis, and onnxruntime
(which d5 does not require) when a comparison first needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor
from d5core.onnx.graph_operator import GRAPH_OPERATORS
from d5core.testing.operator_agreement import (
    CORE_OPERATORS,
    PROPERTIES,
    OperatorAgreementTests,
    property_examples,
)
from d5core.validate import Tolerance

__all__ = [
    "CASES",
    "GRAPH_OPERATOR_TYPES",
    "OPSET",
    "CNNOperatorTests",
    "GraphOperatorTests",
    "TransformerExecutorTests",
    "attention_block",
    "batch_first_by_onnxruntime",
    "feeds_for",
    "one_node_graph",
    "onnxruntime_outputs",
    "recurrent_graph",
    "typed_outputs",
]

#: The opset of the graphs built here.
OPSET = 20
#: The batch, sequence length, width and heads of :func:`attention_block`.
B, T, D, H = 2, 4, 8, 2
#: The operators a backend offers through its graph executor's translation.
GRAPH_OPERATOR_TYPES: tuple[str, ...] = tuple(op for op, _ in GRAPH_OPERATORS)

Graph = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the types shape inference finds for its outputs."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    found = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for value in model.graph.output:
        if value.name in found and found[value.name].type.tensor_type.elem_type:
            value.CopyFrom(found[value.name])
    return model


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
    return typed_outputs(model)


def _values(arrays: dict[str, np.ndarray]) -> list[onnx.ValueInfoProto]:
    return [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in arrays.items()
    ]


def attention_block(dtype: type = np.float32, seed: int = 0) -> onnx.ModelProto:
    """Embedding, LayerNorm, causal two-head attention, a GELU MLP, and a scalar loss:
    inputs ``tokens`` (int64, ``[batch, T]``) and ``x`` (``[batch, T, D]``), outputs
    ``y`` and ``loss``."""
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


def feeds_for(model: onnx.ModelProto, seed: int = 1, batch: int = B) -> dict[str, np.ndarray]:
    """Random feeds for ``model``'s inputs, ``batch`` for each symbolic axis: integers
    in ``[0, 11)`` (token ids) for integer inputs, standard normal values for others."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for v in model.graph.input:
        shape = [d.dim_value or batch for d in v.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.integer):
            feeds[v.name] = rng.integers(0, 11, shape).astype(dtype)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def onnxruntime_outputs(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Every output of ``model`` on ``feeds``, as onnxruntime's CPU provider computes it."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def batch_first_by_onnxruntime(
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
    outs = onnxruntime_outputs(typed_outputs(seq_first), moved)
    perms = {"y": (2, 0, 1, 3), "yh": (1, 0, 2), "yc": (1, 0, 2)}
    return {k: np.transpose(v, perms[k]) for k, v in outs.items()}


def one_node_graph(
    op: str,
    inputs: dict[str, np.ndarray],
    inits: dict[str, np.ndarray] | None = None,
    outputs: Sequence[str] = ("y",),
    **attrs: Any,
) -> Graph:
    """A graph of one ``op`` node, ``inputs`` fed and ``inits`` initializers, and its
    feeds (``inputs``)."""
    inits = inits or {}
    node = helper.make_node(op, [*inputs, *inits], list(outputs), **attrs)
    return _model([node], _values(inputs), list(outputs), inits), inputs


def _f(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _i(*values: Any) -> np.ndarray:
    return np.array(values, np.int64)


#: Graphs of one operator each, by name: each takes the generator its data come from.
CASES: MappingProxyType[str, Callable[[np.random.Generator], Graph]] = MappingProxyType(
    {
        "gather_axis1_negative": lambda r: one_node_graph(
            "Gather", {"x": _f(r, 3, 5, 2)}, {"i": _i([-1, 0], [2, 4])}, axis=1
        ),
        "gather_scalar_index": lambda r: one_node_graph(
            "Gather", {"x": _f(r, 3, 5)}, {"i": np.array(-2, np.int64)}, axis=1
        ),
        "gather_elements": lambda r: one_node_graph(
            "GatherElements", {"x": _f(r, 3, 4)}, {"i": _i([0, -1, 2], [3, 1, 0])}, axis=1
        ),
        "slice_negative_step": lambda r: one_node_graph(
            "Slice",
            {"x": _f(r, 4, 6)},
            {"s": _i(-1, 1), "e": _i(-100, 5), "a": _i(0, 1), "t": _i(-2, 2)},
        ),
        "expand": lambda r: one_node_graph("Expand", {"x": _f(r, 3, 1)}, {"s": _i(2, 1, 4)}),
        "where_broadcast": lambda r: one_node_graph(
            "Where", {"c": r.random((3, 1)) > 0.5, "a": _f(r, 1, 4), "b": _f(r, 3, 4)}
        ),
        "equal_int": lambda r: one_node_graph("Equal", {"a": _i(1, 2, 3)}, {"b": _i([1], [3])}),
        "greater": lambda r: one_node_graph("Greater", {"a": _f(r, 2, 3), "b": _f(r, 3)}),
        "cast_to_bool_and_int": lambda r: one_node_graph(
            "Cast", {"x": _f(r, 2, 3) * 3}, to=TensorProto.BOOL
        ),
        "cast_float_to_int": lambda r: one_node_graph(
            "Cast", {"x": _f(r, 2, 3) * 3}, to=TensorProto.INT32
        ),
        "pow_elementwise": lambda r: one_node_graph(
            "Pow", {"x": np.abs(_f(r, 2, 3)) + 0.5, "p": _f(r, 2, 3)}
        ),
        "erf_exp_log": lambda r: one_node_graph("Erf", {"x": _f(r, 5)}),
        "gelu_tanh": lambda r: one_node_graph("Gelu", {"x": _f(r, 2, 5)}, approximate="tanh"),
        "reduce_max_keep": lambda r: one_node_graph(
            "ReduceMax", {"x": _f(r, 2, 3, 4)}, {"a": _i(0, 2)}, keepdims=1
        ),
        "reduce_sum_all": lambda r: one_node_graph("ReduceSum", {"x": _f(r, 2, 3)}, keepdims=0),
        "layer_norm_axis1_stats": lambda r: one_node_graph(
            "LayerNormalization",
            {"x": _f(r, 2, 3, 4)},
            {"g": _f(r, 3, 4), "b": _f(r, 3, 4)},
            outputs=("y", "mean", "inv"),
            axis=1,
        ),
        "constant_of_shape_fed": lambda r: one_node_graph(
            "ConstantOfShape",
            {"s": _i(2, 3)},
            value=numpy_helper.from_array(np.array([1.5], np.float32)),
        ),
        "batched_broadcast_matmul": lambda r: one_node_graph(
            "MatMul", {"a": _f(r, 2, 1, 3, 4), "b": _f(r, 3, 4, 5)}
        ),
    }
)


def recurrent_graph(
    op: str, direction: str, layout: int, lens: bool, dtype: type = np.float32
) -> Graph:
    """A graph of one ``LSTM`` or ``GRU`` layer (hidden size 3, input width 2, 4 steps,
    batch 2) with an initial state, peepholes (LSTM), ``linear_before_reset`` (GRU,
    when ``reverse``) and, if ``lens``, sequence lengths 4 and 2; and its feeds."""
    rng = np.random.default_rng(7)
    gates, hidden, width, steps, batch = (4 if op == "LSTM" else 3), 3, 2, 4, 2
    dirs = 2 if direction == "bidirectional" else 1
    inits: dict[str, np.ndarray] = {
        "W": (rng.standard_normal((dirs, gates * hidden, width)) * 0.5).astype(dtype),
        "R": (rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5).astype(dtype),
        "B": (rng.standard_normal((dirs, 2 * gates * hidden)) * 0.2).astype(dtype),
    }
    x_shape = (batch, steps, width) if layout else (steps, batch, width)
    names = ["x", "W", "R", "B", "lens" if lens else "", "h0"]
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds: dict[str, np.ndarray] = {
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
    return _model([node], _values(feeds), outputs, inits), feeds


class TransformerExecutorTests:
    """A graph executor runs transformer blocks and recurrent layers as onnxruntime does,
    with gradients that match central differences; subclass it with ``executor`` set
    (see the module docstring)."""

    #: The executor class under test.
    executor: ClassVar[type[GraphExecutor]]
    #: Tolerances of the comparisons with onnxruntime.
    rtol: ClassVar[float] = 1e-4
    atol: ClassVar[float] = 1e-5
    #: Tolerances of the gradients against central differences (float64).
    gradient_rtol: ClassVar[float] = 1e-4
    gradient_atol: ClassVar[float] = 1e-6

    def agree(
        self,
        model: onnx.ModelProto,
        feeds: dict[str, np.ndarray],
        expected: Callable[..., dict[str, np.ndarray]] = onnxruntime_outputs,
    ) -> None:
        """Assert the executor's outputs have the shapes, dtypes and (within the
        tolerances) values ``expected`` gives."""
        got = self.executor(model).inference(feeds)
        for name, want in expected(model, feeds).items():
            assert got[name].shape == want.shape, name
            assert got[name].dtype == want.dtype, name
            np.testing.assert_allclose(
                got[name], want, rtol=self.rtol, atol=self.atol, err_msg=name
            )

    def check_gradients(
        self, model: onnx.ModelProto, feeds: dict[str, np.ndarray], loss: str, picks: int = 4
    ) -> None:
        """Assert each trainable parameter's gradient of ``loss`` matches central
        differences at ``picks`` entries."""
        ex = self.executor(model)
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
                want = pytest.approx(numeric, rel=self.gradient_rtol, abs=self.gradient_atol)
                assert grad.reshape(-1)[flat] == want, name

    def test_the_attention_block_matches_onnxruntime(self) -> None:
        model = attention_block()
        self.agree(model, feeds_for(model))

    def test_the_attention_block_gradients_match_central_differences(self) -> None:
        model = attention_block(np.float64)
        self.check_gradients(model, feeds_for(model), "loss")

    def test_a_new_batch_size_recompiles_the_computed_shapes(self) -> None:
        model = attention_block()
        ex = self.executor(model)
        for batch in (2, 3):
            rng = np.random.default_rng(batch)
            feeds: dict[str, np.ndarray] = {
                "tokens": rng.integers(0, 11, (batch, T)).astype(np.int64),
                "x": rng.standard_normal((batch, T, D)).astype(np.float32),
            }
            want = onnxruntime_outputs(model, feeds)["y"]
            got = ex.inference(feeds)["y"]
            np.testing.assert_allclose(got, want, rtol=self.rtol, atol=self.atol)

    @pytest.mark.parametrize("case", sorted(CASES))
    def test_each_operator_matches_onnxruntime(self, case: str) -> None:
        self.agree(*CASES[case](np.random.default_rng(5)))

    @pytest.mark.parametrize("op", ["LSTM", "GRU"])
    @pytest.mark.parametrize(
        ("direction", "layout", "lens"),
        [("forward", 0, False), ("reverse", 1, True), ("bidirectional", 0, True)],
    )
    def test_recurrent_layers_match_onnxruntime(
        self, op: str, direction: str, layout: int, lens: bool
    ) -> None:
        model, feeds = recurrent_graph(op, direction, layout, lens)
        self.agree(model, feeds, batch_first_by_onnxruntime if layout else onnxruntime_outputs)

    @pytest.mark.parametrize("op", ["LSTM", "GRU"])
    def test_recurrent_layer_gradients_match_central_differences(self, op: str) -> None:
        model, feeds = recurrent_graph(op, "bidirectional", 0, True, np.float64)
        model.graph.node.append(helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0))
        model.graph.output.append(helper.make_empty_tensor_value_info("loss"))
        self.check_gradients(typed_outputs(model), feeds, "loss")

    def test_a_static_input_computed_from_a_feed_value_is_read_per_value(self) -> None:
        x = _f(np.random.default_rng(5), 2, 6)
        model, feeds = one_node_graph("Reshape", {"x": x, "s": _i(3, 4)})
        ex = self.executor(model)
        assert ex.inference(feeds)["y"].shape == (3, 4)
        assert ex.inference({**feeds, "s": _i(4, 3)})["y"].shape == (4, 3)

    def test_an_unsupported_activation_is_one_line_naming_the_node(self) -> None:
        model, _ = recurrent_graph("GRU", "forward", 0, False)
        node = model.graph.node[0]
        node.attribute.append(helper.make_attribute("activations", ["Swish", "Tanh"]))
        with pytest.raises(UsageError, match=r"\(GRU\): activation Swish is not supported") as info:
            self.executor(model)
        assert "\n" not in str(info.value)

    def test_supported_ops_name_the_transformer_and_recurrent_operators(self) -> None:
        wanted = {*GRAPH_OPERATOR_TYPES, "MatMul"}
        assert wanted <= self.executor.supported_ops


class GraphOperatorTests(OperatorAgreementTests):
    """The level-0 operators of :data:`GRAPH_OPERATOR_TYPES` agree with the numpy
    reference on the operator kit's properties; subclass it with ``backend`` set.

    The float64 tolerances are looser than d5's defaults because TensorFlow's and MXNet's
    float64 Gelu gradients are less accurate than the reference's: at x = -0.7037 they
    give 0.0216300822 where the exact derivative (the reference, torch and
    scipy.special.erf agree) is 0.0216300765, 2.6e-7 relative. ``d5 validate op Gelu
    --dtype float64`` reports it at d5's default tolerances; the kit accepts it so that
    it tests everything else. Recurrent layers with ScaledTanh differ by about 1e-8
    absolute for the same reason."""

    operators = GRAPH_OPERATOR_TYPES
    examples = property_examples(3)
    default_problem_dtypes = ("float32",)
    tolerances = MappingProxyType({"float64": Tolerance(rtol=1e-6, atol=1e-8)})

    def test_backend_offers_the_declared_operators_and_each_has_a_property(self) -> None:
        """The backend's other operators are :class:`CNNOperatorTests`' concern."""
        assert set(self.operator_types()) <= set(self.backend.supported())
        assert set(self.operator_types()) <= set(PROPERTIES)


class CNNOperatorTests(OperatorAgreementTests):
    """The operator kit for the operators of a backend other than
    :data:`GRAPH_OPERATOR_TYPES` (those of convolutional networks); subclass it with
    ``backend`` and ``operators`` set. With :class:`GraphOperatorTests` it covers every
    operator the backend offers."""

    def test_backend_offers_the_declared_operators_and_each_has_a_property(self) -> None:
        """This class and :class:`GraphOperatorTests` together cover every operator."""
        supported, declared = set(self.backend.supported()), set(self.operator_types())
        assert supported == declared | set(GRAPH_OPERATOR_TYPES)
        assert supported <= set(PROPERTIES)
        assert declared >= CORE_OPERATORS
