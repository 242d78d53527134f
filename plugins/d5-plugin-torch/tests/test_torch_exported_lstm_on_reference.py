"""An LSTM exported by torch's TorchScript exporter (``dynamo=False``) runs natively on
the numpy reference executor and trains there: the exporter leaves ``sequence_lens``
out before ``initial_h`` (an empty input name), which the executor passes as ``None``
instead of handing the node to onnx.reference. Outputs equal torch's; gradients equal
central differences."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import torch
from d5_plugin_numpy.executor import NumpyExecutor
from onnx import TensorProto, helper

from d5core.testing.networks import assert_gradients_match_central_differences, loss_over_outputs


def _torch_lstm_model() -> tuple[onnx.ModelProto, torch.nn.LSTM, torch.Tensor]:
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(2, 3, bidirectional=True).double()
    x = torch.randn(4, 2, 2, dtype=torch.float64)
    buf = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter warns as it traces
        warnings.simplefilter("ignore")
        torch.onnx.export(
            lstm, (x,), buf, dynamo=False, opset_version=17,
            input_names=["x"], output_names=["y", "h", "c"],
        )  # fmt: skip
    model = onnx.load_from_string(buf.getvalue())
    shapes = [(4, 2, 6), (2, 2, 3), (2, 2, 3)]
    nodes, loss = loss_over_outputs(["y", "h", "c"], shapes, np.random.default_rng(1))
    model.graph.node.extend(nodes)
    model.graph.output.append(helper.make_tensor_value_info(loss, TensorProto.DOUBLE, []))
    return model, lstm, x


def test_torch_exported_lstm_runs_natively_and_trains() -> None:
    model, lstm, x = _torch_lstm_model()
    (node,) = [n for n in model.graph.node if n.op_type == "LSTM"]
    assert node.input[4] == "" and node.input[5]  # sequence_lens absent, initial_h given
    ex = NumpyExecutor(model)
    feeds = {"x": x.numpy()}
    out = ex.inference(feeds)
    assert ex.fallback == {} and ex.details() == {}
    y, (h, c) = lstm(x)
    np.testing.assert_allclose(out["y"], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["h"], h.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["c"], c.detach().numpy(), rtol=1e-12, atol=1e-12)
    grads = assert_gradients_match_central_differences(ex, feeds)
    assert ex.fallback == {}
    assert all(np.abs(g).max() > 0 for g in grads.values())
