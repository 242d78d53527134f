"""Graph passes and the microbatched training step."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor
from d5core.lv1 import zoo
from d5core.lv1.passes import (
    PASSES,
    GraphPass,
    apply_pass,
    graph_passes,
    split_batch,
)
from d5core.onnx.network import Network


def test_split_batch_splits_batch_feeds_and_copies_the_rest() -> None:
    feeds = {"x": np.arange(10).reshape(5, 2), "labels": np.arange(5), "scale": np.float32(2)}
    parts = split_batch(feeds, 2)
    assert [p["x"].shape[0] for p in parts] == [3, 2]
    np.testing.assert_array_equal(np.concatenate([p["labels"] for p in parts]), feeds["labels"])
    assert all(p["scale"] == 2 for p in parts)
    only_x = split_batch({"x": feeds["x"], "w": np.ones(3)}, 5, batch_inputs=["x"])
    assert all(p["w"].shape == (3,) for p in only_x)


def test_split_batch_rejects_bad_k_and_disagreeing_batches() -> None:
    with pytest.raises(UsageError, match="between 1 and the batch size 4, not 5"):
        split_batch({"x": np.zeros((4, 2))}, 5)
    with pytest.raises(UsageError, match="disagree on the batch size"):
        split_batch({"x": np.zeros((4, 2)), "y": np.zeros(3)}, 2)


def test_infer_shapes_pass_is_registered_and_applies() -> None:
    assert "infer_shapes" in PASSES and "infer_shapes" in graph_passes()
    assert issubclass(PASSES["infer_shapes"], GraphPass)
    shaped = apply_pass(zoo.build("mlp"), "infer_shapes")
    assert len(shaped.model.graph.value_info) > 0
    with pytest.raises(UsageError, match="unknown graph pass 'fuse'"):
        apply_pass(zoo.build("mlp"), "fuse")


class _InferenceOnly(GraphExecutor):
    name = "inference-only"
    supported_ops = frozenset({"Gemm", "Relu"})

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}


def test_executor_base_wraps_models_and_reports_missing_training() -> None:
    executor = _InferenceOnly(zoo.mlp())
    assert isinstance(executor.network, Network)
    assert executor.trains is False
    with pytest.raises(UsageError, match="the inference-only executor runs inference only"):
        executor.inference_and_backprop({}, "loss")
    executor.check_supported()
    with pytest.raises(UsageError, match=r"operator 'Conv' \(node 'conv0'\)"):
        _InferenceOnly(zoo.build("lenet5")).check_supported()
    executor.set_parameters({"gemm0.bias": np.ones(128)})
    assert np.all(executor.get_parameters()["gemm0.bias"] == 1)
    with pytest.raises(UsageError, match="no parameter 'w'"):
        executor.set_parameters({"w": np.ones(1)})
