"""The microbatched training step against the unsplit one, on d5's reference executor."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_numpy.executor import NumpyExecutor

from d5core.lv1 import zoo
from d5core.lv1.passes import microbatched_step, split_batch


@pytest.mark.parametrize(
    ("name", "kwargs", "shape"),
    [("mlp", {"input_shape": (12,), "hidden": (16, 8), "classes": 5}, (12,)),
     ("lenet5", {"classes": 5}, (1, 28, 28))],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["cross_entropy", "mse"])
def test_microbatched_step_equals_unsplit_step(
    name: str, kwargs: dict[str, object], shape: tuple[int, ...], kind: str
) -> None:
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
    executor = NumpyExecutor(net)
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
