"""The JAX executor runs the zoo's sequence models (gpt, bert, vit, lstm) as the numpy
reference does: outputs in float32, and in float64 the loss and the gradient of every
parameter; and its RNN layer (which the shared kit does not cover) agrees with
onnxruntime in every direction, with sequence lengths and batch-first layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_jax.executor import JaxExecutor
from onnx import helper, numpy_helper

from d5core.api import UsageError
from d5core.onnx.network import Network
from d5core.testing.executors import SEQUENCE_MODELS, executor_by_name, make_feeds, with_loss
from d5core.testing.sequence_forward import TINY
from d5core.testing.transformer_graphs import (
    OPSET,
    batch_first_by_onnxruntime,
    onnxruntime_outputs,
    typed_outputs,
)

MODELS = ("gpt", "bert", "vit", "lstm")


def _tiny(name: str) -> Network:
    return Network(SEQUENCE_MODELS[name](**TINY[name]))


def _feeds(net: Network, batch: int = 3) -> dict[str, np.ndarray]:
    feeds = make_feeds(net, batch, seed=0)
    if "input_ids" in feeds:
        feeds["input_ids"][:, -1] = 0  # id 0 pads: bert masks it
    return feeds


@pytest.mark.parametrize("model", MODELS)
def test_zoo_sequence_model_outputs_match_the_reference(model: str) -> None:
    network = _tiny(model)
    feeds = _feeds(network)
    expected = executor_by_name("numpy", network).inference(feeds)["output"]
    got = JaxExecutor(network).inference(feeds)["output"]
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["gpt", "bert", "lstm"])  # vit's operators: gpt's and Conv
def test_zoo_sequence_model_gradients_match_the_reference_in_float64(model: str) -> None:
    trained, loss = with_loss(_tiny(model).as_float64())
    feeds = _feeds(trained)
    ref_out, ref_grads = executor_by_name("numpy", trained).inference_and_backprop(feeds, loss)
    out, grads = JaxExecutor(trained).inference_and_backprop(feeds, loss)
    np.testing.assert_allclose(out[loss], ref_out[loss], rtol=1e-9)
    assert sorted(grads) == sorted(ref_grads)
    for name, expected in ref_grads.items():
        np.testing.assert_allclose(grads[name], expected, rtol=1e-7, atol=1e-10, err_msg=name)


def _rnn_graph(direction: str, layout: int, lens: bool) -> tuple[Any, dict[str, np.ndarray]]:
    """One RNN layer (hidden 3, width 2, 4 steps, batch 2) with an initial state and,
    if ``lens``, sequence lengths 4 and 2; and its feeds."""
    rng = np.random.default_rng(11)
    dirs = 2 if direction == "bidirectional" else 1
    hidden, width, steps, batch = 3, 2, 4, 2
    x_shape = (batch, steps, width) if layout else (steps, batch, width)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds = {
        "x": rng.standard_normal(x_shape).astype(np.float32),
        "h0": rng.standard_normal(state).astype(np.float32),
    }
    inits = {
        "W": (rng.standard_normal((dirs, hidden, width)) * 0.5).astype(np.float32),
        "R": (rng.standard_normal((dirs, hidden, hidden)) * 0.5).astype(np.float32),
        "B": (rng.standard_normal((dirs, 2 * hidden)) * 0.2).astype(np.float32),
    }
    if lens:
        feeds["lens"] = np.array([steps, steps - 2], np.int32)
    node = helper.make_node(
        "RNN", ["x", "W", "R", "B", "lens" if lens else "", "h0"], ["y", "yh"],
        hidden_size=hidden, direction=direction, layout=layout,
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "rnn",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in ("y", "yh")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return typed_outputs(model), feeds


@pytest.mark.parametrize(
    ("direction", "layout", "lens"),
    [("forward", 0, False), ("reverse", 0, True), ("bidirectional", 1, True)],
)
def test_rnn_layer_matches_onnxruntime(direction: str, layout: int, lens: bool) -> None:
    model, feeds = _rnn_graph(direction, layout, lens)
    expected = (batch_first_by_onnxruntime if layout else onnxruntime_outputs)(model, feeds)
    got = JaxExecutor(model).inference(feeds)
    for name, want in expected.items():
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_an_unknown_rnn_activation_is_one_line_naming_the_node() -> None:
    model, feeds = _rnn_graph("forward", 0, False)
    model.graph.node[0].attribute.append(helper.make_attribute("activations", ["Swish"]))
    with pytest.raises(UsageError, match=r"\(RNN\): activation Swish is not supported") as info:
        JaxExecutor(model).inference(feeds)
    assert "\n" not in str(info.value)
