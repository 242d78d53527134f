"""Feeds and parameters written into MXNet's arrays directly (not through the engine) land
where MXNet reads them: in a new array, in a live parameter after a training step, and in
convolution weights an inference pass left in oneDNN's own layout."""

from __future__ import annotations

import numpy as np
from d5_plugin_mxnet._host import filled, host_view, write_all
from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.executor import MXNetExecutor

from d5core.testing.executors import build_network, make_feeds, with_loss

mx = mxnet()


def test_a_filled_array_holds_the_value_in_every_dtype() -> None:
    rng = np.random.default_rng(0)
    for dtype in ("float32", "float64", "float16", "int64", "int32", "uint8", "int8"):
        value = (rng.standard_normal((3, 5)) * 50).astype(dtype)
        array = filled(value, mx.cpu())
        assert array.dtype == np.dtype(dtype) and array.shape == (3, 5)
        np.testing.assert_array_equal(array.asnumpy(), value)


def test_a_filled_array_takes_a_non_contiguous_value() -> None:
    value = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    np.testing.assert_array_equal(filled(value, mx.cpu()).asnumpy(), value)


def test_write_all_waits_for_queued_work_on_the_array() -> None:
    a = mx.nd.ones((256, 256))
    out = mx.nd.zeros((256, 256))
    for _ in range(20):  # work queued that writes ``out`` after the copy is asked for
        mx.nd.dot(a, a, out=out)
    value = np.full((256, 256), 7.0, dtype=np.float32)
    write_all([(out, value)])
    np.testing.assert_array_equal(out.asnumpy(), value)


def test_write_all_casts_to_the_arrays_dtype_and_shape() -> None:
    live = mx.nd.zeros((2, 3), dtype="float32")
    write_all([(live, np.arange(6, dtype=np.float64))])
    np.testing.assert_array_equal(live.asnumpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(host_view(live), live.asnumpy())


def _lenet() -> tuple[MXNetExecutor, MXNetExecutor, str]:
    net, loss = with_loss(build_network("lenet5", seed=0))
    again, _ = with_loss(build_network("lenet5", seed=0))
    return MXNetExecutor(net), MXNetExecutor(again), loss


def test_parameters_set_after_an_inference_pass_are_the_ones_the_next_pass_reads() -> None:
    # An inference pass leaves convolution weights in oneDNN's blocked layout; a write
    # into the plain layout must reach the weights the next pass reads.
    live, fresh, _ = _lenet()
    feeds = make_feeds(live.network, 4, seed=1)
    live.inference(feeds)
    rng = np.random.default_rng(2)
    new = {
        name: (rng.standard_normal(value.shape) * 0.1).astype(value.dtype)
        for name, value in live.get_parameters().items()
        if value.dtype.kind == "f"
    }
    live.set_parameters(new)
    fresh.set_parameters(new)
    for name, value in live.get_parameters().items():
        if name in new:
            np.testing.assert_array_equal(value, new[name])
    got, want = live.inference(feeds), fresh.inference(feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_parameters_set_between_training_steps_match_a_fresh_executor() -> None:
    live, fresh, loss = _lenet()
    feeds = make_feeds(live.network, 4, seed=3)
    _, grads = live.inference_and_backprop(feeds, loss)
    params = live.get_parameters()
    stepped = {name: params[name] - 0.1 * grad for name, grad in grads.items()}
    live.set_parameters(stepped)
    fresh.set_parameters(stepped)
    got = live.inference_and_backprop(feeds, loss)
    want = fresh.inference_and_backprop(feeds, loss)
    for g, w in zip(got, want, strict=True):
        for name in w:
            np.testing.assert_allclose(g[name], w[name], rtol=1e-5, atol=1e-6)
