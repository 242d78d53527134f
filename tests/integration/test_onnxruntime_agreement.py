"""d5's networks computed by onnxruntime: the loss d5 adds, and the light models' outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from d5core.lv1 import zoo
from d5core.onnx.network import Network, ValueInfo


def test_cross_entropy_loss_adds_int64_labels_and_scalar_output(tmp_path: Path) -> None:
    net = zoo.build("lenet5")
    loss = net.add_loss("output")
    assert net.inputs[-1] == ValueInfo("labels", (None,), "int64")
    assert net.outputs[-1] == ValueInfo(loss, (), "float32")
    node = net.nodes[-1]
    assert (node.op_type, node.domain, list(node.input)) == (
        "SoftmaxCrossEntropyLoss", "", ["output", "labels"],
    )  # fmt: skip
    assert helper.get_attribute_value(node.attribute[0]) == b"mean"
    Network.load(net.save(tmp_path / "ce.onnx"))
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
    labels = np.array([0, 4, 9])
    logits, value = ort.InferenceSession(net.to_bytes()).run(None, {"input": x, "labels": labels})
    shifted = logits - logits.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    assert value == pytest.approx(-logp[np.arange(3), labels].mean(), rel=1e-5)


def test_light_model_output_matches_onnxruntime_on_documented_input() -> None:
    model, expected = zoo.light_model("squeezenet")
    session = ort.InferenceSession(Network(model).to_bytes())
    (out,) = session.run(None, zoo.light_inputs(model))
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-7)
