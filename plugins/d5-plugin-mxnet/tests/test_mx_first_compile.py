"""The first signature of feeds is compiled without running the graph imperatively: its
symbol is built node by node from the shapes MXNet infers from the feeds and
parameters, as a hybridized Gluon block is traced. It is the symbol an imperative pass
builds, and it computes exactly what an executor compiling through that pass computes."""

from __future__ import annotations

from typing import Any

import pytest
from compile_checks import assert_derived_as_imperative, assert_same
from d5_plugin_mxnet.executor import MXNetExecutor

from d5core.api import UsageError
from d5core.testing.executors import build_network, make_feeds, with_loss

MODELS = ["mlp", "lenet5", "resnet20", "vgg", "lstm", "bert"]


def _through_imperative_passes(net: Any) -> MXNetExecutor:
    """An executor that compiles every signature through an imperative pass."""
    ex = MXNetExecutor(net)
    ex._derived = lambda *args, **kwargs: None  # type: ignore[method-assign]
    return ex


@pytest.mark.parametrize("model", MODELS)
def test_a_first_training_step_trains_as_one_compiled_through_an_imperative_pass(
    model: str, imperative_passes: list[int]
) -> None:
    net, loss = with_loss(build_network(model, seed=0))
    feeds = make_feeds(net, 4, seed=0)
    ex, ref = MXNetExecutor(net), _through_imperative_passes(net)
    outs, grads = ex.inference_and_backprop(feeds, loss)
    assert not imperative_passes
    want_outs, want_grads = ref.inference_and_backprop(feeds, loss)
    assert imperative_passes
    assert_same(outs, want_outs)
    assert_same(grads, want_grads)


@pytest.mark.parametrize("model", MODELS)
def test_a_first_inference_computes_what_an_imperative_pass_computes(
    model: str, imperative_passes: list[int]
) -> None:
    net, _ = with_loss(build_network(model, seed=0))
    feeds = make_feeds(net, 3, seed=1)
    got = MXNetExecutor(net).inference(feeds)
    assert not imperative_passes
    assert_same(got, _through_imperative_passes(net).inference(feeds))


@pytest.mark.parametrize("model", MODELS)
def test_a_first_signatures_symbol_is_the_one_an_imperative_pass_builds(model: str) -> None:
    net, loss = with_loss(build_network(model, seed=0))
    ex = MXNetExecutor(net)
    arrays = ex.to_native(make_feeds(net, 5, seed=2))
    heads = ex._heads(True, loss)
    derived = ex._derived(arrays, True, heads, {**ex._known})
    assert derived is not None
    known = {**ex._known}
    assert_derived_as_imperative(ex, arrays, loss, heads, derived, known)


def test_a_loss_no_node_computes_is_still_named(imperative_passes: list[int]) -> None:
    net, _ = with_loss(build_network("mlp", seed=0))
    ex = MXNetExecutor(net)
    with pytest.raises(UsageError, match="not a tensor of the network"):
        ex.inference_and_backprop(make_feeds(net, 2, seed=0), "no_such_loss")
    assert imperative_passes  # the imperative pass names what is wrong
