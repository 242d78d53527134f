"""Graph passes and the microbatched training step."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor
from d5core.networks import Network, zoo
from d5core.networks.passes import (
    PASSES,
    GraphPass,
    apply_pass,
    graph_passes,
    microbatched_step,
    split_batch,
)


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


@pytest.mark.parametrize(
    ("name", "kwargs", "shape"),
    [("mlp", {"input_shape": (12,), "hidden": (16, 8), "classes": 5}, (12,)),
     ("lenet5", {"classes": 5}, (1, 28, 28))],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["cross_entropy", "mse"])
def test_microbatched_step_equals_unsplit_step(
    name: str, kwargs: dict[str, object], shape: tuple[int, ...], kind: str
) -> None:
    executor_module = pytest.importorskip("d5_plugin_numpy.executor")
    net = zoo.build(name, seed=1, **kwargs)
    loss = net.add_loss("output", kind=kind)
    rng = np.random.default_rng(0)
    batch = 7
    labels = (
        rng.integers(0, 5, batch)
        if kind == "cross_entropy"
        else rng.standard_normal((batch, 5)).astype(np.float32)
    )
    feeds = {"input": rng.standard_normal((batch, *shape)).astype(np.float32), "labels": labels}
    executor = executor_module.NumpyExecutor(net)
    outputs, grads = executor.inference_and_backprop(feeds, loss)
    micro_out, micro_grads = microbatched_step(executor, feeds, loss, 3)
    assert set(micro_grads) == set(grads) == set(net.trainable)
    for key in grads:
        np.testing.assert_allclose(micro_grads[key], grads[key], rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(micro_out[loss], outputs[loss], rtol=1e-5)
    np.testing.assert_allclose(micro_out["output"], outputs["output"], rtol=1e-5, atol=1e-6)
    # the check can fail: without the size weights the result differs
    parts = split_batch(feeds, 3)
    unweighted = sum(executor.inference_and_backprop(p, loss)[1]["gemm0.bias"] for p in parts) / 3
    assert not np.allclose(unweighted, grads["gemm0.bias"], rtol=2e-4, atol=1e-6)
